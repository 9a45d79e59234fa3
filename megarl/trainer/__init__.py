"""The RL loop and what it does on the driver between the workers' passes; the SFT loop."""
