"""`megarl convert`: a verl launch script as a megarl recipe (shell → verl overrides → recipe lines → YAML)."""
