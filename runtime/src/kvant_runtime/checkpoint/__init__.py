"""Model I/O, the room `convert`, `gptq`, `calibrate` and `evaluate` stand on (none of them imports
another sideways): shards read and written (`safetensors_io`), a source's weight map and files
(`source`, `contained_paths`), staging and atomic writes (`staging`), layers read and streamed through
transformers' own modules (`layer_reader`, `layer_stream`), the KV cache's layout and a tap on it
(`kv_layout`, `kv_tap`), token windows of calibration or evaluation text (`token_windows`), and the one
error type for input the user must fix (`errors.CheckpointError`)."""

# The torch devices a layer streams onto (--device of calibrate, eval and GPTQ), here so that
# torch-free modules (gptq_settings) can check a flag without importing torch.
DEVICES = ("cpu", "cuda")
