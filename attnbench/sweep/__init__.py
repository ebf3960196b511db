"""The suite file: its strict schema and its expansion into cases."""
