"""Tests for the Textual screens and widgets."""
