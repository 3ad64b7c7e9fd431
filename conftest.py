"""Root conftest: its presence puts the repository root on sys.path for the tests."""
