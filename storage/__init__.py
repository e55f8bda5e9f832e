"""Storage: SQLAlchemy models, migrations, object stores, dataset versions."""
