"""`kvant fetch`: a model source (hf://, s3://) downloaded, verified per file and published atomically."""
