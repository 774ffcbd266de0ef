"""When appended bytes are on disk: the flusher (fsync policy, high watermark hooks),
group commit on a thread per log dir, and the disk-full reporter."""
