"""The long-form test corpus (recordings with their truth) and its measures' printing."""
