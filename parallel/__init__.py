"""Parallel runtime of megarl: process groups (training mesh, rollout TP groups), worker placement on Ray
or torchrun, weight resharding into the rollout engine, and CPU offload. It never imports the trainer."""
