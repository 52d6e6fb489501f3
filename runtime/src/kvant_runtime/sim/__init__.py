"""The SGLang-compatible engine simulator (`kvant sim`, `serving.engine: simulator`)."""
