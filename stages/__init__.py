"""One thin CLI per DVC stage: parse params, call one ``ml`` function, write outputs atomically."""
