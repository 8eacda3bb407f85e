"""The settings of each stage, one typed object per stage, importable without torch."""
