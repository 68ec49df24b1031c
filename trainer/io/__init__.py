"""What a run leaves on disk or in a bucket: workdirs and their locks, checkpoints and their integrity, metrics files, storage paths."""
