"""Text rendering for the platforms: Markdown as LLMs write it parsed and rendered per platform,
and split into parts that fit a platform's size limit; and the one bounded JSON parser every
request body goes through (`jsonbody`)."""
