"""The dialogs: model manager, settings, drafter training, fastest setting, help."""
