"""Reading model checkpoints for their shapes, never their weights (issue 5: in progress)."""
