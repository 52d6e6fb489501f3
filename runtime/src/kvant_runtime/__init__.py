"""What runs in Kvant pods: converter, launcher, gate, simulator, eval (never imports kopf)."""
