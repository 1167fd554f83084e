"""Reading model checkpoints for their shapes, never their weights."""
