"""The zoo, the real target and the training pipeline (training/, project tooling)."""
