"""Base's structural results recorded by a trusted run and reused by a review: the store, base's
compile cache packed beside its record, the files a probe read, the environment fingerprint."""
