"""Run a converted model's source in its own framework, for verify."""
