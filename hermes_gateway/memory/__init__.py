"""Long-term memory on the gateway's side: the archive in the store (keywords, vectors, recency),
the embeddings client, recall's ranking, and whose memory a session sees (per user or shared)."""
