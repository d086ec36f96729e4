"""Parsers of what training jobs leave behind: one module per input format."""
