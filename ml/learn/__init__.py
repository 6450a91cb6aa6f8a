"""Training: the supervised student (``supervised``) and its train-once check (``reuse``), PPO self-play (``ppo``), their DVCLive curves (``curves``),
the seed, device and progress bar of a run (``settings``)."""
