"""Reusable dashboard widgets (Textual); each module holds one widget and its data types."""
