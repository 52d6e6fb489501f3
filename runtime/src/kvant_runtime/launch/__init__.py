"""The SGLang launcher (`kvant launch`): plan -> validated SGLang argv -> exec."""
