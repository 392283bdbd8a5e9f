"""The `openblox` command."""
