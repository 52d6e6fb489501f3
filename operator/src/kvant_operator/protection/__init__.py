"""The slow, global protection loop: engine metrics in, an effective concurrency per model out."""
