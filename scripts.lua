-- Every Lua script redlock runs on a master. Each section starts with a line
-- "--- name" and runs until the next one; node.go splits them at start-up.
--
-- All scripts of a lock named k take the same keys, which share the Redis
-- Cluster hash tag {k}:
--   KEYS[1] {k}        hash: owner, nonce, holds, token (exclusive, reentrant, write)
--   KEYS[2] {k}:fence  fencing counter; never expires
--   KEYS[3] {k}:r      read-write locks only: zset reader -> expiry (ms)
--   KEYS[4] {k}:rn     read-write locks only: hash reader -> nonce
--   KEYS[5] {k}:ww     read-write locks only: write-wait marker (a writer)
-- and the same arguments:
--   ARGV[1] owner, ARGV[2] TTL (ms), ARGV[3] holds after the operation,
--   ARGV[4] "1" to hand out a fencing token, ARGV[5] write-wait TTL (ms),
--   0 for a writer that will not wait, ARGV[6] nonce of the Lock.
-- The nonce is random per Lock value in Go: an owner may take a lock again
-- with a new Lock while an old one's late calls are still under way, and
-- extend, release and fence act only on the Lock whose nonce is stored.
-- A positive reply means the master agreed; 0 that it refused; -1 that the
-- owner holds a read lock and asked for the write lock (an upgrade).
-- Release publishes the owner on channel {k} so that waiters retry at once.

--- acquire
-- Exclusive, reentrant and write locks. Replies the lock's token (1 when
-- not fencing). A re-entry (holds > 1) keeps the owner's token and renews
-- the TTL; a first acquire is a fresh grant, even over the owner's leftover.
local cur = redis.call('HMGET', KEYS[1], 'owner', 'token')
if cur[1] then
  if cur[1] ~= ARGV[1] then return 0 end
  if ARGV[3] ~= '1' then
    redis.call('HSET', KEYS[1], 'holds', ARGV[3], 'nonce', ARGV[6])
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return tonumber(cur[2])
  end
end
if KEYS[3] then
  local t = redis.call('TIME')
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', t[1] * 1000 + math.floor(t[2] / 1000))
  if redis.call('ZSCORE', KEYS[3], ARGV[1]) then return -1 end
  if redis.call('ZCARD', KEYS[3]) > 0 then
    if tonumber(ARGV[5]) > 0 then redis.call('SET', KEYS[5], ARGV[1], 'PX', ARGV[5]) end
    return 0
  end
end
local token = 1
if ARGV[4] == '1' then token = redis.call('INCR', KEYS[2]) end
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'nonce', ARGV[6], 'holds', ARGV[3], 'token', token)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if KEYS[5] and redis.call('GET', KEYS[5]) == ARGV[1] then redis.call('DEL', KEYS[5]) end
return token

--- fence
-- Raises the fencing counter to the token ARGV[3] where this Lock still
-- holds the lock, so that every later token is larger.
local cur = redis.call('HMGET', KEYS[1], 'owner', 'nonce')
if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[6] then return 0 end
if tonumber(redis.call('GET', KEYS[2]) or '0') < tonumber(ARGV[3]) then
  redis.call('SET', KEYS[2], ARGV[3])
end
redis.call('HSET', KEYS[1], 'token', ARGV[3])
return 1

--- extend
-- Sets a new TTL only where this Lock still holds the lock; a missing key is
-- never re-created.
local cur = redis.call('HMGET', KEYS[1], 'owner', 'nonce')
if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[6] then return 0 end
return redis.call('PEXPIRE', KEYS[1], ARGV[2])

--- release
-- Drops holds to ARGV[3] where this Lock holds the lock; at 0 deletes it.
local cur = redis.call('HMGET', KEYS[1], 'owner', 'nonce')
if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[6] then return 0 end
if tonumber(ARGV[3]) > 0 then
  redis.call('HSET', KEYS[1], 'holds', ARGV[3])
  return 1
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', KEYS[1], ARGV[1])
return 1

--- read_acquire
-- Granted unless another owner holds the write lock, or a writer waits and
-- this owner does not read yet. Each reader expires on its own.
local writer = redis.call('HGET', KEYS[1], 'owner')
if writer and writer ~= ARGV[1] then return 0 end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
if not writer and not redis.call('ZSCORE', KEYS[3], ARGV[1]) then
  local waiting = redis.call('GET', KEYS[5])
  if waiting and waiting ~= ARGV[1] then return 0 end
end
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[2]), ARGV[1])
redis.call('HSET', KEYS[4], ARGV[1], ARGV[6])
for _, k in ipairs({KEYS[3], KEYS[4]}) do
  if redis.call('PTTL', k) < tonumber(ARGV[2]) then redis.call('PEXPIRE', k, ARGV[2]) end
end
return 1

--- read_extend
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
if not redis.call('ZSCORE', KEYS[3], ARGV[1]) then return 0 end
if redis.call('HGET', KEYS[4], ARGV[1]) ~= ARGV[6] then return 0 end
redis.call('ZADD', KEYS[3], 'XX', now + tonumber(ARGV[2]), ARGV[1])
for _, k in ipairs({KEYS[3], KEYS[4]}) do
  if redis.call('PTTL', k) < tonumber(ARGV[2]) then redis.call('PEXPIRE', k, ARGV[2]) end
end
return 1

--- read_release
local t = redis.call('TIME')
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', t[1] * 1000 + math.floor(t[2] / 1000))
if not redis.call('ZSCORE', KEYS[3], ARGV[1]) then return 0 end
if redis.call('HGET', KEYS[4], ARGV[1]) ~= ARGV[6] then return 0 end
if tonumber(ARGV[3]) > 0 then return 1 end
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
redis.call('PUBLISH', KEYS[1], ARGV[1])
return 1
