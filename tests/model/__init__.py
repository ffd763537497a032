"""model/: targets, drafters, checkpoint layouts and configs, chat templates."""
