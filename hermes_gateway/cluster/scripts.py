"""The Lua scripts that make a lease and its fencing token one atomic step on Redis: a lease is
a hash {owner, token} with an expiry; the counter behind the tokens never expires."""

# A new holder's token is the counter's next value or the server's clock in microseconds,
# whichever is larger: a Redis that lost its data (restarted without persistence) still
# issues tokens above every earlier one, as long as its clock does not step back meanwhile.

# KEYS: lease, counter; ARGV: owner, ttl ms -> {1, token} granted, {0, holder} refused
ACQUIRE = """
local held = redis.call('HMGET', KEYS[1], 'owner', 'token')
if held[1] then
  if held[1] ~= ARGV[1] then return {0, held[1]} end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, held[2]}
end
local now = redis.call('TIME')
local floor = tonumber(now[1]) * 1000000 + tonumber(now[2])
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
local token = string.format('%.0f', math.max(last + 1, floor))
redis.call('SET', KEYS[2], token)
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', token)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, token}
"""

# KEYS: leases; ARGV: owner, ttl ms, then each lease's token -> for each lease 1 extended,
# 0 not this holder's any more (one round trip for every lease an instance keeps)
RENEW = """
local renewed = {}
for i, key in ipairs(KEYS) do
  local held = redis.call('HMGET', key, 'owner', 'token')
  if held[1] == ARGV[1] and held[2] == ARGV[i + 2] then
    redis.call('PEXPIRE', key, ARGV[2])
    renewed[i] = 1
  else
    renewed[i] = 0
  end
end
return renewed
"""

# KEYS: leases; ARGV: owner, then each lease's token -> for each lease 1 released, 0 not
# this holder's
RELEASE = """
local released = {}
for i, key in ipairs(KEYS) do
  local held = redis.call('HMGET', key, 'owner', 'token')
  if held[1] == ARGV[1] and held[2] == ARGV[i + 1] then
    redis.call('DEL', key)
    released[i] = 1
  else
    released[i] = 0
  end
end
return released
"""

# KEYS: gate; ARGV: holder, ttl ms -> 0 passed (shut for ttl ms now), else ms until it opens
GATE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
return math.max(1, redis.call('PTTL', KEYS[1]))
"""

# KEYS: setting; ARGV: value, ttl ms -> the value kept (the first writer's); kept longer by a
# writer of the same value, untouched by another
SETTLE = """
local kept = redis.call('GET', KEYS[1])
if not kept then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return ARGV[1]
end
if kept == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return kept
"""
