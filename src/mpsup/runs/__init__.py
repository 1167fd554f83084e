"""Run records: the typed, versioned document (schema), storing and journaling runs (store, journal),
and choosing which stored runs a report is about (select)."""
