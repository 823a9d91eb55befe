"""tensorkiln: a small deep-learning compiler."""
