"""The embedded default corpus (see PROVENANCE.json)."""
