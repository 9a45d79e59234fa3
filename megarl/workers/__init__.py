"""The RL roles as controller workers (parallel.worker.Worker): what each GPU's process hosts."""
