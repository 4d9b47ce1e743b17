"""The bundled controllers: burst-taint, migrate-back, node-health, quota-sync."""
