"""Perturbations of docs/ab-protocol.md's registration schema: a field of the registration dataclasses the
doc no longer documents (tests/falsification; format in perturbations_attnres.py)."""

from __future__ import annotations

PERTURBATIONS: list[dict] = [
    {
        "name": "registration_doc_drops_a_field",
        "file": "docs/ab-protocol.md",
        "function": "<file>",
        "old": "aa_data_seed_base: 1001        # the A/A arm's",
        "new": "aa_seed_base: 1001             # the A/A arm's",
        "gates": ["tests/ab/test_registration_schema_doc.py::"
                  "test_protocol_doc_documents_exactly_the_registration_fields[comparison]"],
        "why": "the protocol's schema names a key the registration does not have and omits one it does: a "
               "reader writing a file from the doc gets it refused, or never learns the A/A stream exists",
        "protects": "A/B rule",
    },
]
