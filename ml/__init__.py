"""distill-loop library: games, decision records, training, gate and the loop's orchestration."""
