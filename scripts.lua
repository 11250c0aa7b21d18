-- Every Lua script redlock runs on a master. Each section starts with a line
-- "--- name" and runs until the next one; node.go splits them at start-up.
--
-- All scripts of a lock named k take the same keys, which hash to one Redis
-- Cluster slot; K is the lock's main key, {k} for most names (see lockKey
-- in node.go):
--   KEYS[1] K          the holder of the exclusive, reentrant or write lock (see
--                      "Lock values" below)
--   KEYS[2] K:fence    fencing counter; expires two TTLs after it was last set
--   KEYS[3] K:r        read-write locks only: zset reader -> expiry (ms)
--   KEYS[4] K:rn       read-write locks only: hash reader -> nonce
--   KEYS[5] K:ww       read-write locks only: write-wait marker (a writer)
-- and the same arguments:
--   ARGV[1] owner, ARGV[2] TTL (ms), ARGV[3] holds after the operation,
--   ARGV[4] acquire only: "0" for no fencing token, else the proposed token
--   (the client's clock in microseconds), ARGV[5] write-wait TTL (ms),
--   0 for a writer that will not wait, ARGV[6] nonce of the Lock,
--   ARGV[7] releases only: "1" to leave a marker if nothing is found, "2"
--   to leave it in any case (see below); repair only: the Lock's token, and
--   ARGV[8] the TTL (ms) its fencing counter is kept for.
-- A section named "--- name @lib..." starts with the sections "@lib"
-- (helpers).
-- The nonce is random per Lock value in Go: an owner may take a lock again
-- with a new Lock while an old one's late calls are still under way, and
-- extend, release and fence act only on the Lock whose nonce is stored.
-- A positive reply means the master agreed; 0 that it refused; -1 that the
-- owner holds a read lock and asked for the write lock (an upgrade).
-- An acquire can land after its undo, or after the Lock's last release:
-- those may travel on another connection, and overtake it where the
-- acquire's call timed out (a stalled master, a proxy that relays each
-- connection on its own). So an undo or a last release that finds nothing
-- of its Lock leaves a marker, K:gone:nonce, for the lock's TTL, and an
-- acquire refuses a nonce with a marker: an acquire that lands within a TTL
-- of it leaves nothing (one that lands later leaves a key for its TTL). A
-- re-entry (holds > 1) never creates a missing key. The marker is not
-- declared in KEYS (its name holds the nonce) but hashes to K's Redis
-- Cluster slot.
-- The last release of a Lock publishes its nonce on channel K so that
-- waiters retry at once: every master where an acquire was refused while
-- the Lock held the lock (a read-write lock's: every master), and waiters
-- take the copies of one nonce for one release. An uncontended lock
-- publishes nothing.
-- Fencing tokens are a hybrid logical clock per lock name: a master hands
-- out the larger of its counter + 1 and the client's proposal (its clock in
-- microseconds) held within a quarter TTL of the master's own clock, and
-- keeps the counter for two TTLs (see "Fencing tokens" in README.md for why
-- later tokens are larger even across restarts). Counters are int64 kept
-- as decimal text: a Lua number is a double, exact only up to 2^53, so a
-- token never passes through one beyond that (INCR's own reply is one: from
-- 2^53 on, the counter is read back with GET), and tokens are returned as
-- bulk strings.

--- @tokens
-- less reports a < b for counters as decimal text (no sign, no leading
-- zeros): by length, then byte by byte.
local function less(a, b)
  if #a ~= #b then return #a < #b end
  for i = 1, #a do
    local x, y = a:byte(i), b:byte(i)
    if x ~= y then return x < y end
  end
  return false
end

-- nextToken hands out this master's next token for counter key fence,
-- given the client's proposal and the TTL (ms). It returns nil and an
-- error, leaving the counter's value as it was (it now expires), when the
-- counter is not an integer or is the largest int64.
local function nextToken(fence, proposal, ttl)
  local t = redis.call('TIME')
  local now, slack = t[1] * 1000000 + t[2], ttl * 250
  local token = string.format('%.0f', math.min(math.max(tonumber(proposal), now - slack), now + slack))
  local old = redis.pcall('SET', fence, token, 'PX', 2 * ttl, 'GET')
  if type(old) == 'table' and old.err then return nil, old.err end
  if not old or (old:find('^%d+$') and less(old, token)) then return token end
  -- The counter is at or past the proposal: count on from it.
  redis.call('SET', fence, old, 'PX', 2 * ttl)
  local n = redis.pcall('INCR', fence)
  if type(n) == 'table' and n.err then return nil, n.err end
  if n < 9007199254740992 then return string.format('%.0f', n) end
  return redis.call('GET', fence)
end

-- raiseFence sets counter key fence to token where that is larger, and
-- keeps it two TTLs (ms) from now.
local function raiseFence(fence, token, ttl)
  local cur = redis.call('GET', fence)
  if cur and not less(cur, token) then token = cur end
  redis.call('SET', fence, token, 'PX', 2 * ttl)
end

--- @value
-- Lock values. K holds the string "holds:token:waited:holder": holds and
-- token in decimal, waited "1" once an acquire was refused while this
-- holder held the lock (its last release publishes), and holder the
-- nonce's length, ':', the nonce and the owner, so that every nonce and
-- owner has its own. One string keeps an uncontended lock and unlock at
-- two commands each, and it is refused as a whole: a key of another type
-- under K (left by an older release of redlock) makes every script fail
-- or refuse rather than take it over.

-- holderOf returns the holder part of a value for nonce and owner.
local function holderOf(nonce, owner)
  return #nonce .. ':' .. nonce .. owner
end

-- valueOf is the lock value of holds, token, waited and holder: parse's
-- inverse.
local function valueOf(holds, token, waited, holder)
  return holds .. ':' .. token .. ':' .. waited .. ':' .. holder
end

-- parse splits a lock value into holds, token, waited and holder; all are
-- nil for no value (false) or one not in this form.
local function parse(v)
  if not v then return nil end
  local holds, token, waited, holder = v:match('^(%d+):(%d+):([01]):(.*)$')
  local n, rest = (holder or ''):match('^(%d+):(.*)$')
  if not n or tonumber(n) > #rest then return nil end
  return holds, token, waited, holder
end

-- ownerOf returns the owner part of a holder that parse returned.
local function ownerOf(holder)
  local n, rest = holder:match('^(%d+):(.*)$')
  return rest:sub(tonumber(n) + 1)
end

--- @readers
-- trimReaders drops the readers whose holds expired, from K:r and from
-- K:rn, and returns the master's clock in milliseconds.
local function trimReaders()
  local t = redis.call('TIME')
  local now = t[1] * 1000 + math.floor(t[2] / 1000)
  local expired = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
  if #expired > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
    for i = 1, #expired, 1000 do -- unpack's stack holds a few thousand
      redis.call('HDEL', KEYS[4], unpack(expired, i, math.min(i + 999, #expired)))
    end
  end
  return now
end

--- acquire @value @tokens @readers
-- Exclusive, reentrant and write locks. Replies the lock's token (1 when
-- not fencing). Only the Lock that holds it (same owner and nonce) may
-- re-enter: that keeps its token and renews the TTL. Another Lock of the
-- same owner is refused like any other: were it to take the lock over, a
-- late call of an earlier attempt could make that attempt's undo delete a
-- newer Lock's hold. A refusal marks the holder's value as waited for.
local me = holderOf(ARGV[6], ARGV[1])
local found = redis.call('MGET', KEYS[1], KEYS[1] .. ':gone:' .. ARGV[6])
if found[1] then
  local holds, token, waited, holder = parse(found[1])
  if holder ~= me then
    if waited == '0' then redis.call('SET', KEYS[1], valueOf(holds, token, '1', holder), 'KEEPTTL') end
    return 0
  end
  redis.call('SET', KEYS[1], valueOf(ARGV[3], token, waited, me), 'PX', ARGV[2])
  return token
end
if tonumber(ARGV[3]) > 1 or found[2] then return 0 end
if KEYS[3] then
  trimReaders()
  if redis.call('ZSCORE', KEYS[3], ARGV[1]) then return -1 end
  if redis.call('ZCARD', KEYS[3]) > 0 then
    if tonumber(ARGV[5]) > 0 then redis.call('SET', KEYS[5], ARGV[1], 'PX', ARGV[5]) end
    return 0
  end
end
local token = '1'
if ARGV[4] ~= '0' then
  -- Fails before the lock is written.
  local err
  token, err = nextToken(KEYS[2], ARGV[4], tonumber(ARGV[2]))
  if not token then
    return redis.error_reply('fencing counter ' .. KEYS[2] .. ' = ' ..
      tostring(redis.call('GET', KEYS[2])) .. ' cannot be incremented: ' .. err)
  end
end
-- NX: a key of another type is not taken over.
if not redis.call('SET', KEYS[1], valueOf(ARGV[3], token, '0', me), 'NX', 'PX', ARGV[2]) then return 0 end
if KEYS[5] and redis.call('GET', KEYS[5]) == ARGV[1] then redis.call('DEL', KEYS[5]) end
return token

--- fence @value @tokens
-- Raises the fencing counter to the token ARGV[3] where this Lock still
-- holds the lock, so that every later token is larger.
local holds, _, waited, holder = parse(redis.call('GET', KEYS[1]))
if holder ~= holderOf(ARGV[6], ARGV[1]) then return 0 end
raiseFence(KEYS[2], ARGV[3], tonumber(ARGV[2]))
redis.call('SET', KEYS[1], valueOf(holds, ARGV[3], waited, holder), 'KEEPTTL')
return 1

--- extend @value
-- Sets a new TTL only where this Lock still holds the lock; a missing key is
-- never re-created.
local _, _, _, holder = parse(redis.call('GET', KEYS[1]))
if holder ~= holderOf(ARGV[6], ARGV[1]) then return 0 end
return redis.call('PEXPIRE', KEYS[1], ARGV[2])

--- repair @value @tokens @readers
-- After an extend that a quorum decided without this master, sets the
-- lock again here where this master lost it (it restarted empty, or the
-- key expired): never where any lock, reader or marker of this Lock is. A
-- later release deletes it, and leaves a marker there (ARGV[7] "2"): a
-- timed-out acquire or another repair that lands later is refused.
if redis.call('EXISTS', KEYS[1] .. ':gone:' .. ARGV[6]) == 1 then return 0 end
if KEYS[3] then
  trimReaders()
  if redis.call('ZCARD', KEYS[3]) > 0 then return 0 end
end
if not redis.call('SET', KEYS[1], valueOf(ARGV[3], ARGV[7], '0', holderOf(ARGV[6], ARGV[1])), 'NX', 'PX', ARGV[2]) then return 0 end
if ARGV[4] ~= '0' then raiseFence(KEYS[2], ARGV[7], tonumber(ARGV[8])) end
return 1

--- release @value
-- Drops holds to ARGV[3] where this Lock holds the lock; at 0 deletes it,
-- and publishes where an acquire waited for it.
local holds, token, waited, holder = parse(redis.call('GET', KEYS[1]))
if holder ~= holderOf(ARGV[6], ARGV[1]) then
  if ARGV[7] then redis.call('SET', KEYS[1] .. ':gone:' .. ARGV[6], '1', 'PX', ARGV[2]) end
  return 0
end
if tonumber(ARGV[3]) > 0 then
  redis.call('SET', KEYS[1], valueOf(ARGV[3], token, waited, holder), 'KEEPTTL')
  return 1
end
redis.call('DEL', KEYS[1])
if ARGV[7] == '2' then redis.call('SET', KEYS[1] .. ':gone:' .. ARGV[6], '1', 'PX', ARGV[2]) end
if waited == '1' or KEYS[3] then redis.call('PUBLISH', KEYS[1], ARGV[6]) end
return 1

--- read_acquire @value @readers
-- Granted unless another owner holds the write lock, or a writer waits and
-- this owner does not read yet. Each reader expires on its own. The write
-- lock's release publishes in any case.
local found = redis.call('GET', KEYS[1])
local _, _, _, holder = parse(found)
local writer = holder and ownerOf(holder)
if found and writer ~= ARGV[1] then return 0 end
local now = trimReaders()
if redis.call('ZSCORE', KEYS[3], ARGV[1]) then
  -- Only the Lock that reads may re-enter (see acquire).
  if redis.call('HGET', KEYS[4], ARGV[1]) ~= ARGV[6] then return 0 end
else
  if tonumber(ARGV[3]) > 1 or redis.call('EXISTS', KEYS[1] .. ':gone:' .. ARGV[6]) == 1 then return 0 end
  if not writer then
    local waiting = redis.call('GET', KEYS[5])
    if waiting and waiting ~= ARGV[1] then return 0 end
  end
end
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[2]), ARGV[1])
redis.call('HSET', KEYS[4], ARGV[1], ARGV[6])
for _, k in ipairs({KEYS[3], KEYS[4]}) do
  if redis.call('PTTL', k) < tonumber(ARGV[2]) then redis.call('PEXPIRE', k, ARGV[2]) end
end
return 1

--- read_extend @readers
local now = trimReaders()
if not redis.call('ZSCORE', KEYS[3], ARGV[1]) then return 0 end
if redis.call('HGET', KEYS[4], ARGV[1]) ~= ARGV[6] then return 0 end
redis.call('ZADD', KEYS[3], 'XX', now + tonumber(ARGV[2]), ARGV[1])
for _, k in ipairs({KEYS[3], KEYS[4]}) do
  if redis.call('PTTL', k) < tonumber(ARGV[2]) then redis.call('PEXPIRE', k, ARGV[2]) end
end
return 1

--- read_release @readers
trimReaders()
if not redis.call('ZSCORE', KEYS[3], ARGV[1]) or redis.call('HGET', KEYS[4], ARGV[1]) ~= ARGV[6] then
  if ARGV[7] == '1' then redis.call('SET', KEYS[1] .. ':gone:' .. ARGV[6], '1', 'PX', ARGV[2]) end
  return 0
end
if tonumber(ARGV[3]) > 0 then return 1 end
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
redis.call('PUBLISH', KEYS[1], ARGV[6])
return 1
