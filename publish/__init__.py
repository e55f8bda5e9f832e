"""Dataset building: a version's shards and manifest, sealed; exports for the trainers."""
