"""The operator's actions: each builds a ``Plan`` (every API call it will make, in order,
with what the preflight found), which ``--dry-run`` prints and ``execute`` runs."""
