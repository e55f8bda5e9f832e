"""Label Studio: labelling configs, pushing tasks, pulling verdicts."""
