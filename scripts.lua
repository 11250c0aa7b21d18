-- Every Lua script redlock runs on a master. Each section starts with a line
-- "--- name" and runs until the next one; node.go splits them at start-up.
--
-- All scripts of a lock named k take the same keys, which hash to one Redis
-- Cluster slot; K is the lock's main key, {k} for most names (see lockKey
-- in node.go):
--   KEYS[1] K          the holder of the exclusive, reentrant or write lock (see
--                      "Lock values" below)
--   KEYS[2] K:r        read-write locks only: zset reader -> expiry (ms)
--   KEYS[3] K:rn       read-write locks only: hash reader -> nonce
--   KEYS[4] K:ww       read-write locks only: write-wait marker (a writer)
-- (readers also keep K:rh, a string, for as long as they hold, which the
-- exclusive and reentrant locks of the same name read: see
-- readersRefuseByName),
-- and the same arguments:
--   ARGV[1] owner, ARGV[2] TTL (ms), ARGV[3] holds after the operation,
--   ARGV[4] "0" for no fencing token, else "1", except: a new acquire's
--   proposed token (the client's clock in microseconds, in decimal), and a last
--   release's Lock token where it has one; ARGV[5] write-wait TTL (ms),
--   0 for a writer that will not wait, ARGV[6] nonce of the Lock,
--   ARGV[7] releases only: "1" to leave a marker if nothing is found, "2"
--   to leave it in any case (see below); repair only: the Lock's token.
-- A section named "--- name @lib..." starts with the sections "@lib"
-- (helpers). Each script runs two ways (see node.go): with EVALSHA, as the
-- text of its helpers and its own, where KEYS and ARGV are globals; and as
-- one Redis Function of a library that defines every helper once, where
-- they are the function's parameters. So a helper never names KEYS nor
-- ARGV: a script passes what a helper needs.
-- The nonce is random per Lock value in Go: an owner may take a lock again
-- with a new Lock while an old one's late calls are still under way, and
-- extend, release and fence act only on the Lock whose nonce is stored.
-- A positive reply means the master agreed; 0 that it refused; -1 that the
-- owner holds a read lock and asked for the write lock (an upgrade); below
-- -1, a refusal that names something: from sem_acquire, -2-s, slot s free;
-- from multi_acquire, -1-i, its i-th name held; from fair_acquire, -2, a
-- live waiter ahead of the ticket. A
-- last release replies 2 where an acquire was refused while its Lock held
-- the lock (the value's waited flag), 1 where none was.
-- An acquire can land after its undo, or after the Lock's last release:
-- those may travel on another connection, and overtake it where the
-- acquire's call timed out (a stalled master, a proxy that relays each
-- connection on its own). So an undo or a last release that finds nothing
-- of its Lock leaves a marker, K:gone:nonce, for the longest TTL the Lock
-- asked for (ARGV[2]), and an acquire refuses a nonce with a marker: an
-- acquire that lands within that TTL of it leaves nothing (one that lands
-- later leaves a key for its TTL). A
-- re-entry (holds > 1) never creates a missing key. The marker is not
-- declared in KEYS (its name holds the nonce) but hashes to K's Redis
-- Cluster slot; so do K:rh, K:r and K:rn, which an exclusive or reentrant
-- lock's scripts read without declaring them (see readersRefuseByName).
-- The last release of a Lock publishes its nonce on channel K so that
-- waiters retry at once: every master where an acquire was refused while
-- the Lock held the lock (a read-write lock's: every master), and waiters
-- take the copies of one nonce for one release. An uncontended lock
-- publishes nothing.
-- Fencing tokens are a hybrid logical clock per lock name: a master hands
-- out the larger of its counter + 1 and the client's proposal (its clock in
-- microseconds) held within TTL/16 of the master's own clock. The counter is
-- the token in K's value, held or free, and lives as long as K (see
-- "Fencing tokens" in README.md for why later tokens are larger even across
-- restarts and expiries). Counters are int64 kept as decimal text: a Lua
-- number is a double, exact only up to 2^53, so a counter never passes
-- through one, and tokens are returned as bulk strings.

--- @tokens
-- less reports a < b for counters as decimal text (no sign, no leading
-- zeros): by length, then as numbers, 15 digits at a time.
local function less(a, b)
  if #a ~= #b then return #a < #b end
  if a == b then return false end
  for i = 1, #a, 15 do -- each piece is exact as a Lua number
    local x, y = tonumber(a:sub(i, i + 14)), tonumber(b:sub(i, i + 14))
    if x ~= y then return x < y end
  end
  return false
end

local maxCounter = '9223372036854775807'

-- nextToken hands out this master's next token, given the lock's counter
-- here (nil for none), the client's proposal and the TTL (ms): the larger
-- of counter + 1 and the proposal held within TTL/16 of the master's
-- clock. It returns nil and why where the counter cannot be incremented.
local function nextToken(counter, proposal, ttl)
  local t = redis.call('TIME')
  local now, slack = t[1] * 1000000 + t[2], math.floor(ttl * 62.5)
  local token, p = proposal, tonumber(proposal)
  local held = math.min(math.max(p, now - slack), now + slack)
  if held ~= p then token = string.format('%.0f', held) end
  if not counter or less(counter, token) then return token end
  if counter:find('^0.') or less(maxCounter, counter) then return nil, 'not an int64' end
  if counter == maxCounter then return nil, 'int64 overflow' end
  -- counter + 1, digit by digit.
  local i = #counter
  while i > 0 and counter:byte(i) == 57 do i = i - 1 end -- '9'
  if i == 0 then return '1' .. string.rep('0', #counter) end
  return counter:sub(1, i - 1) .. string.char(counter:byte(i) + 1) .. string.rep('0', #counter - i)
end

--- @ttl
-- A lock's TTL is never shortened on a master: an extend or re-entry whose
-- call timed out may land after a later one that succeeded (on another
-- connection, through a client that does not pipeline, or a proxy that
-- relays each connection on its own), and must not cut the lock short of
-- the validity its Lock counts on.

-- atLeast returns ttl (ms), or key's TTL where that is longer.
local function atLeast(key, ttl)
  return math.max(ttl, redis.call('PTTL', key))
end

-- lengthen sets key's TTL to ttl (ms) unless it is that long already.
local function lengthen(key, ttl)
  if redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, ttl) end
end

--- @value
-- Lock values. A held lock's K holds the string "holds:token:waited:holder":
-- holds and token in decimal, waited "1" once an acquire was refused while
-- this holder held the lock (its last release publishes), and holder the
-- nonce's length, ':', the nonce and the owner, so that every nonce and
-- owner has its own. The last release leaves "f:counter", a free lock that
-- keeps the fencing counter (the token) for the rest of the key's TTL;
-- without fencing, where there is no counter (token "0"), it deletes K.
-- One string keeps an uncontended fenced lock and unlock at three commands
-- and one, and it is refused as a whole: a key of another type, or a string
-- of another form, under K makes every script fail or refuse rather than
-- take it over.

-- holderOf returns the holder part of a value for nonce and owner.
local function holderOf(nonce, owner)
  return #nonce .. ':' .. nonce .. owner
end

-- valueOf is the lock value of holds, token, waited and holder: parse's
-- inverse.
local function valueOf(holds, token, waited, holder)
  return holds .. ':' .. token .. ':' .. waited .. ':' .. holder
end

-- parse splits a held lock's value into holds, token, waited and holder;
-- all are nil for no value (false), a free lock or a value of another form.
local function parse(v)
  if not v then return nil end
  local holds, token, waited, holder, n, rest = v:match('^(%d+):(%d+):([01]):((%d+):(.*))$')
  if not n or tonumber(n) > #rest then return nil end
  return holds, token, waited, holder
end

-- counterOf returns the counter of a free lock's value, nil for any other.
local function counterOf(v)
  return v and v:match('^f:(%d+)$')
end

-- ownerOf returns the owner part of a holder that parse returned.
local function ownerOf(holder)
  local n, rest = holder:match('^(%d+):(.*)$')
  return rest:sub(tonumber(n) + 1)
end

--- @readers
-- trimReaders drops the readers whose holds expired, from K:r and from
-- K:rn (keys are the script's KEYS), and returns the master's clock in
-- milliseconds.
local function trimReaders(keys)
  local t = redis.call('TIME')
  local now = t[1] * 1000 + math.floor(t[2] / 1000)
  local expired = redis.call('ZRANGEBYSCORE', keys[2], '-inf', now)
  if #expired > 0 then
    redis.call('ZREMRANGEBYSCORE', keys[2], '-inf', now)
    for i = 1, #expired, 1000 do -- unpack's stack holds a few thousand
      redis.call('HDEL', keys[3], unpack(expired, i, math.min(i + 999, #expired)))
    end
  end
  return now
end

-- markReaders keeps K:rh (key is K) for at least a second longer than the
-- reader just granted or extended holds (ttl ms): a reader's expiry is
-- taken from TIME, which may run ahead of the clock that expires keys
-- during a script.
local function markReaders(key, ttl)
  local rh = key .. ':rh'
  ttl = ttl + 1000
  if redis.call('PTTL', rh) < ttl then redis.call('SET', rh, '1', 'PX', ttl) end
end

-- readersRefuse returns what the readers of a read-write lock (keys as
-- KEYS) make an acquire for owner reply, once the expired ones are
-- dropped: -1 (an upgrade) where owner reads, 0 where others do, nil where
-- none does.
local function readersRefuse(keys, owner)
  trimReaders(keys)
  if redis.call('ZSCORE', keys[2], owner) then return -1 end
  if redis.call('ZCARD', keys[2]) > 0 then return 0 end
  return nil
end

-- readersRefuseByName is readersRefuse for the exclusive or reentrant lock
-- of the same name as the read-write lock whose main key is key: its
-- scripts get only K, read K:rh with it, and ask only where that is set.
-- Where no reader is left, K:rh is deleted.
local function readersRefuseByName(key, owner)
  local refused = readersRefuse({key, key .. ':r', key .. ':rn'}, owner)
  if not refused then redis.call('DEL', key .. ':rh') end
  return refused
end

--- @acquireLock
-- Exclusive, reentrant and write locks. Replies the lock's token (1 when
-- not fencing). Only the Lock that holds it (same owner and nonce) may
-- re-enter: that keeps its token and renews the TTL. Another Lock of the
-- same owner is refused like any other: were it to take the lock over, a
-- late call of an earlier attempt could make that attempt's undo delete a
-- newer Lock's hold. A refusal marks the holder's value as waited for.
-- Readers keep a writer out, and so the exclusive or reentrant lock of
-- their name.
-- acquireLock is that script, of keys and argv, its KEYS and ARGV: acquire
-- and fair_acquire, which adds to it, pass them on.
local function acquireLock(keys, argv)
local me = holderOf(argv[6], argv[1])
local found = redis.call('MGET', keys[1], keys[1] .. ':gone:' .. argv[6], keys[1] .. ':rh')
local holds, token, waited, holder = parse(found[1])
if holder then
  if holder ~= me then
    if waited == '0' then redis.call('SET', keys[1], valueOf(holds, token, '1', holder), 'KEEPTTL') end
    return 0
  end
  redis.call('SET', keys[1], valueOf(argv[3], token, waited, me), 'PX', atLeast(keys[1], tonumber(argv[2])))
  if argv[4] == '0' then return 1 end
  return token
end
local counter = counterOf(found[1])
if found[1] and not counter then return 0 end
if tonumber(argv[3]) > 1 or found[2] then return 0 end
if keys[2] then
  local refused = readersRefuse(keys, argv[1])
  if refused == 0 and tonumber(argv[5]) > 0 then redis.call('SET', keys[4], argv[1], 'PX', argv[5]) end
  if refused then return refused end
elseif found[3] then
  local refused = readersRefuseByName(keys[1], argv[1])
  if refused then return refused end
end
token = counter or '0' -- without fencing, a counter is kept as it is
if argv[4] ~= '0' then
  -- Fails before the lock is written.
  local err
  token, err = nextToken(counter, argv[4], tonumber(argv[2]))
  if not token then
    return redis.error_reply('fencing counter ' .. counter .. ' of ' .. keys[1] .. ' cannot be incremented: ' .. err)
  end
end
if counter then
  redis.call('SET', keys[1], valueOf(argv[3], token, '0', me), 'PX', argv[2])
elseif not redis.call('SET', keys[1], valueOf(argv[3], token, '0', me), 'NX', 'PX', argv[2]) then
  return 0 -- a key of another type
end
if keys[4] and redis.call('GET', keys[4]) == argv[1] then redis.call('DEL', keys[4]) end
if argv[4] == '0' then return 1 end
return token
end

--- acquire @value @tokens @readers @ttl @acquireLock
return acquireLock(KEYS, ARGV)

--- fence @value @tokens
-- Raises the counter to the token ARGV[3] where this Lock still holds the
-- lock, so that every later token is larger.
local holds, token, waited, holder = parse(redis.call('GET', KEYS[1]))
if holder ~= holderOf(ARGV[6], ARGV[1]) then return 0 end
if less(token, ARGV[3]) then redis.call('SET', KEYS[1], valueOf(holds, ARGV[3], waited, holder), 'KEEPTTL') end
return 1

--- resume @value
-- Takes the lock that owner ARGV[1] holds here, under any nonce, over for
-- the Lock of nonce ARGV[6]: after a restart, or from another process.
-- The old Lock's nonce is replaced, so its later calls find nothing. The
-- token, the waited flag and the TTL stay: a resume never lengthens the
-- lock. Holds become ARGV[3]. It replies the token (1 when not fencing),
-- or 0 where owner does not hold the lock, or a marker of the nonce
-- refuses a call that landed after the Lock's release.
local found = redis.call('MGET', KEYS[1], KEYS[1] .. ':gone:' .. ARGV[6])
local _, token, waited, holder = parse(found[1])
if not holder or found[2] or ownerOf(holder) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], valueOf(ARGV[3], token, waited, holderOf(ARGV[6], ARGV[1])), 'KEEPTTL')
if ARGV[4] == '0' or token == '0' then return 1 end
return token

--- remaining @value
-- Replies the TTL (ms) left where the Lock of nonce ARGV[6] and owner
-- ARGV[1] holds the lock, else 0. It writes nothing.
local _, _, _, holder = parse(redis.call('GET', KEYS[1]))
if holder ~= holderOf(ARGV[6], ARGV[1]) then return 0 end
return math.max(redis.call('PTTL', KEYS[1]), 0)

--- @extendHeld
-- extendHeld sets key's TTL to ttl (ms) only where the Lock of nonce and
-- owner still holds the lock, never a shorter one (see @ttl). A missing
-- key is never re-created. It replies 1 where it did, else 0.
local function extendHeld(key, owner, ttl, nonce)
  local _, _, _, holder = parse(redis.call('GET', key))
  if holder ~= holderOf(nonce, owner) then return 0 end
  lengthen(key, ttl)
  return 1
end

--- extend @value @ttl @extendHeld
-- Sets a new TTL only where this Lock still holds the lock.
return extendHeld(KEYS[1], ARGV[1], tonumber(ARGV[2]), ARGV[6])

--- extend_many @value @ttl @extendHeld
-- Extends many Locks at once, for auto-renewal: one call per master for
-- them all. KEYS are each Lock's main key; ARGV holds three arguments per
-- Lock: owner, TTL (ms), nonce. It replies an array: each Lock's reply to
-- extend, in order.
local replies = {}
for i = 1, #KEYS do
  local a = 3 * i - 2
  replies[i] = extendHeld(KEYS[i], ARGV[a], tonumber(ARGV[a + 1]), ARGV[a + 2])
end
return replies

--- repair @value @tokens @readers @ttl
-- After an extend that a quorum decided without this master, sets the
-- lock again here where this master lost it (it restarted empty, or the
-- key expired) with the Lock's token ARGV[7]: never where any lock, reader
-- or marker of this Lock is. A
-- later release frees it, and leaves a marker there (ARGV[7] "2"): a
-- timed-out acquire or another repair that lands later is refused.
local found = redis.call('MGET', KEYS[1], KEYS[1] .. ':gone:' .. ARGV[6], KEYS[1] .. ':rh')
local counter = counterOf(found[1])
if found[2] or (found[1] and not counter) then return 0 end
local token = ARGV[7] -- the counter, where it passed the token, is kept
if ARGV[4] == '0' or counter and less(token, counter) then token = counter or '0' end
if KEYS[2] then
  if readersRefuse(KEYS, ARGV[1]) then return 0 end
elseif found[3] and readersRefuseByName(KEYS[1], ARGV[1]) then
  return 0
end
local value = valueOf(ARGV[3], token, '0', holderOf(ARGV[6], ARGV[1]))
if counter then
  -- The validity left may be shorter than the counter's TTL: never cut it.
  redis.call('SET', KEYS[1], value, 'PX', atLeast(KEYS[1], tonumber(ARGV[2])))
elseif not redis.call('SET', KEYS[1], value, 'NX', 'PX', ARGV[2]) then
  return 0
end
return 1

--- @releaseLock
-- Drops holds to ARGV[3] where this Lock holds the lock; at 0 leaves a free
-- lock with the larger of its token and ARGV[4] (the Lock's token, when it
-- has one) as counter, and publishes where an acquire waited for it.
-- releaseLock is that script, of keys and argv, its KEYS and ARGV: release
-- and the fair lock's scripts, which add to it, pass them on.
local function releaseLock(keys, argv)
local me = holderOf(argv[6], argv[1])
-- A master out of memory refuses the marker's SET, as it would a late
-- acquire's: a release there does without it.
local function mark()
  if argv[7] then redis.pcall('SET', keys[1] .. ':gone:' .. argv[6], '1', 'PX', argv[2]) end
end
if tonumber(argv[3]) > 0 then
  local _, token, waited, holder = parse(redis.call('GET', keys[1]))
  if holder ~= me then
    mark()
    return 0
  end
  redis.call('SET', keys[1], valueOf(argv[3], token, waited, holder), 'KEEPTTL')
  return 1
end
-- Free first, in one command where the lock is ours; what was there
-- otherwise is put back, TTL and all.
local free = 'f:' .. argv[4]
local old = redis.pcall('SET', keys[1], free, 'KEEPTTL', 'GET')
-- A master out of memory refuses the SET, not a GET nor a DEL. Where the
-- lock keeps no counter (token "0") it is deleted; elsewhere a DEL would
-- lose the counter, and later tokens could be smaller: the refusal is the
-- reply, and the lock expires there.
local refusal
if type(old) == 'table' then
  if old.err:find('WRONGTYPE', 1, true) then -- a key of another type, left as it was
    mark()
    return 0
  end
  if argv[4] ~= '0' then return old end
  refusal, old = old, redis.call('GET', keys[1])
end
-- The usual value, this Lock's one hold with its token and no waiter, needs
-- no parse: argv[4] is decimal, so the value compared is one parse splits
-- the same way.
local token, waited, holder = argv[4], '0', me
if old ~= valueOf('1', token, waited, me) then token, waited, holder = select(2, parse(old)) end
if holder ~= me then
  local counter = counterOf(old)
  if refusal then -- nothing was written
  elseif not old then
    redis.call('DEL', keys[1])
  elseif not counter or less(argv[4], counter) then
    redis.call('SET', keys[1], old, 'KEEPTTL')
  end
  mark()
  return 0
end
if token == '0' then
  redis.call('DEL', keys[1])
elseif refusal then -- a counter a fenced client left
  return refusal
elseif less(argv[4], token) then
  redis.call('SET', keys[1], 'f:' .. token, 'KEEPTTL')
end
if argv[7] == '2' then mark() end
if waited == '1' or keys[2] then redis.call('PUBLISH', keys[1], argv[6]) end
if waited == '1' then return 2 end
return 1
end

--- release @value @tokens @releaseLock
return releaseLock(KEYS, ARGV)

--- read_acquire @value @readers @ttl
-- Granted unless another owner holds the write lock, or a writer waits and
-- this owner does not read yet. Each reader expires on its own. The write
-- lock's release publishes in any case; a refusal marks the writer's value
-- as waited for all the same (see release's reply).
local found = redis.call('GET', KEYS[1])
local holds, token, waited, holder = parse(found)
local writer = holder and ownerOf(holder)
if found and not counterOf(found) and writer ~= ARGV[1] then
  if waited == '0' then redis.call('SET', KEYS[1], valueOf(holds, token, '1', holder), 'KEEPTTL') end
  return 0
end
local now = trimReaders(KEYS)
if redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  -- Only the Lock that reads may re-enter (see acquire).
  if redis.call('HGET', KEYS[3], ARGV[1]) ~= ARGV[6] then return 0 end
else
  if tonumber(ARGV[3]) > 1 or redis.call('EXISTS', KEYS[1] .. ':gone:' .. ARGV[6]) == 1 then return 0 end
  if not writer then
    local waiting = redis.call('GET', KEYS[4])
    if waiting and waiting ~= ARGV[1] then return 0 end
  end
end
redis.call('ZADD', KEYS[2], 'GT', now + tonumber(ARGV[2]), ARGV[1]) -- never shorter (see @ttl)
redis.call('HSET', KEYS[3], ARGV[1], ARGV[6])
lengthen(KEYS[2], tonumber(ARGV[2]))
lengthen(KEYS[3], tonumber(ARGV[2]))
markReaders(KEYS[1], tonumber(ARGV[2]))
return 1

--- @extendReader
-- extendReader extends the read hold of owner with nonce for ttl (ms),
-- never shorter (see @ttl); keys are the read-write lock's four keys. It
-- replies 1 where owner holds it, else 0.
local function extendReader(keys, owner, ttl, nonce)
  local now = trimReaders(keys)
  if not redis.call('ZSCORE', keys[2], owner) then return 0 end
  if redis.call('HGET', keys[3], owner) ~= nonce then return 0 end
  redis.call('ZADD', keys[2], 'XX', 'GT', now + ttl, owner)
  lengthen(keys[2], ttl)
  lengthen(keys[3], ttl)
  markReaders(keys[1], ttl)
  return 1
end

--- read_extend @readers @ttl @extendReader
return extendReader(KEYS, ARGV[1], tonumber(ARGV[2]), ARGV[6])

--- read_extend_many @readers @ttl @extendReader
-- read_extend for many Locks at once (see extend_many): KEYS are each
-- Lock's four keys, ARGV three arguments per Lock.
local replies = {}
for i = 1, #KEYS / 4 do
  local k, a = 4 * i - 3, 3 * i - 2
  local keys = {KEYS[k], KEYS[k + 1], KEYS[k + 2], KEYS[k + 3]}
  replies[i] = extendReader(keys, ARGV[a], tonumber(ARGV[a + 1]), ARGV[a + 2])
end
return replies

--- read_release @readers
trimReaders(KEYS)
if not redis.call('ZSCORE', KEYS[2], ARGV[1]) or redis.call('HGET', KEYS[3], ARGV[1]) ~= ARGV[6] then
  if ARGV[7] == '1' then redis.call('SET', KEYS[1] .. ':gone:' .. ARGV[6], '1', 'PX', ARGV[2]) end
  return 0
end
if tonumber(ARGV[3]) > 0 then return 1 end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
if redis.call('EXISTS', KEYS[2]) == 0 then redis.call('DEL', KEYS[1] .. ':rh') end -- the last reader
redis.call('PUBLISH', KEYS[1], ARGV[6])
return 1

--- @multi
-- Multi-resource locks (package multi). KEYS are the main keys of several
-- names, K1..Kn, sorted by name and distinct: the same keys as the
-- exclusive lock of each name, so each name's lock and fencing counter are
-- shared with its plain locks. ARGV as above; ARGV[3] is always 1 (or 0
-- for a release): a multi-resource lock holds once. On a master, every
-- script sets or clears all the names of its Lock, or none. A release
-- marker is K1:gone:nonce only: every call of one Lock has the same KEYS.

-- heldAll reports whether the Lock of nonce and owner holds every key
-- here.
local function heldAll(keys, owner, nonce)
  local me = holderOf(nonce, owner)
  for i = 1, #keys do
    local _, _, _, holder = parse(redis.call('GET', keys[i]))
    if holder ~= me then return false end
  end
  return true
end

--- multi_acquire @value @tokens @readers @ttl @multi
-- Takes every name where each is free here, else none. Replies the token
-- (1 when not fencing), else 0, or -1-i where the i-th name (from 1) is
-- the first found held, by another Lock or by readers: the client names
-- it in the refusal. With fencing, the token is the largest of each
-- name's next token (see nextToken), and every name takes it as its
-- counter: larger than any earlier token of each name here. A refusal
-- marks each holder met as waited for, so that its release publishes: it
-- changes no name of its own. Readers of a name keep it out, as for
-- acquire.
local me = holderOf(ARGV[6], ARGV[1])
if tonumber(ARGV[3]) ~= 1 then return 0 end
if redis.call('EXISTS', KEYS[1] .. ':gone:' .. ARGV[6]) == 1 then return 0 end
local free, mine, counters, held = true, 0, {}, nil
for i = 1, #KEYS do
  local found = redis.call('MGET', KEYS[i], KEYS[i] .. ':rh')
  local holds, token, waited, holder = parse(found[1])
  if holder == me then
    mine = mine + 1
  elseif holder then
    if waited == '0' then redis.call('SET', KEYS[i], valueOf(holds, token, '1', holder), 'KEEPTTL') end
    free, held = false, held or i
  elseif found[1] then
    counters[i] = counterOf(found[1])
    if not counters[i] then free = false end -- a string of another form
  elseif redis.call('EXISTS', KEYS[i]) == 1 then
    free = false -- a key of another type
  end
  -- Past a refusal, readers are asked only to find a held name.
  if (free or not held) and not holder and found[2] and readersRefuseByName(KEYS[i], ARGV[1]) then
    free, held = false, held or i
  end
end
if mine == #KEYS then -- the same call, landed twice
  if ARGV[4] == '0' then return 1 end
  local _, token = parse(redis.call('GET', KEYS[1]))
  return token
end
if held and mine == 0 then return -1 - held end
if not free or mine > 0 then return 0 end
local tokens, token = {}, '0'
for i = 1, #KEYS do tokens[i] = counters[i] or '0' end -- without fencing, kept as they are
if ARGV[4] ~= '0' then
  -- Every token first: a failure leaves nothing written.
  for i = 1, #KEYS do
    local t, err = nextToken(counters[i], ARGV[4], tonumber(ARGV[2]))
    if not t then
      return redis.error_reply('fencing counter ' .. counters[i] .. ' of ' .. KEYS[i] .. ' cannot be incremented: ' .. err)
    end
    if less(token, t) then token = t end
  end
  for i = 1, #KEYS do tokens[i] = token end
end
for i = 1, #KEYS do
  redis.call('SET', KEYS[i], valueOf('1', tokens[i], '0', me), 'PX', ARGV[2])
end
if ARGV[4] == '0' then return 1 end
return token

--- multi_fence @value @tokens @multi
-- Raises every name's counter to the token ARGV[3] where this Lock still
-- holds them all here, so that every later token of each name is larger.
if not heldAll(KEYS, ARGV[1], ARGV[6]) then return 0 end
for i = 1, #KEYS do
  local holds, token, waited, holder = parse(redis.call('GET', KEYS[i]))
  if less(token, ARGV[3]) then redis.call('SET', KEYS[i], valueOf(holds, ARGV[3], waited, holder), 'KEEPTTL') end
end
return 1

--- multi_extend @value @ttl @multi
-- Sets a new TTL on every name, never a shorter one (see @ttl), only
-- where this Lock holds them all here. Replies 1 where it did, else 0.
if not heldAll(KEYS, ARGV[1], ARGV[6]) then return 0 end
for i = 1, #KEYS do lengthen(KEYS[i], tonumber(ARGV[2])) end
return 1

--- multi_release @value @tokens @multi
-- Frees every name this Lock holds here, as release frees one: each keeps
-- the larger of its token and ARGV[4] as counter (deleted without one),
-- and publishes the nonce on its own channel where an acquire waited for
-- it. Where this Lock holds no name here, it leaves the marker as release
-- does (ARGV[7] "1"); with ARGV[7] "2" it leaves it in any case. Replies
-- 0 where it held none, 2 where a name was waited for, else 1.
local me = holderOf(ARGV[6], ARGV[1])
local freed, waitedFor = 0, false
for i = 1, #KEYS do
  local _, token, waited, holder = parse(redis.call('GET', KEYS[i]))
  if holder == me then
    if token == '0' then
      redis.call('DEL', KEYS[i])
    else
      if less(token, ARGV[4]) then token = ARGV[4] end
      redis.call('SET', KEYS[i], 'f:' .. token, 'KEEPTTL')
    end
    if waited == '1' then
      redis.call('PUBLISH', KEYS[i], ARGV[6])
      waitedFor = true
    end
    freed = freed + 1
  end
end
-- A master out of memory refuses the marker's SET: a release there does
-- without it.
if ARGV[7] == '2' or ARGV[7] and freed == 0 then
  redis.pcall('SET', KEYS[1] .. ':gone:' .. ARGV[6], '1', 'PX', ARGV[2])
end
if freed == 0 then return 0 end
if waitedFor then return 2 end
return 1

--- @election
-- Elections (package election). The election named n is the exclusive
-- lock named n (KEYS[1], K), and K:eh (KEYS[2]), its history: a stream of
-- what its leaders proclaimed. An entry's ID is "epoch-seq": the leader's
-- fencing token, and 0 for its win or n for its n-th proclaim after it. Its
-- one field is "v" with the value, or "r" with "" where the leader resigned.
-- A leader writes only where its Lock holds the lock, on a quorum, so a
-- read of any majority meets every leader's win. Tokens only grow, so the
-- IDs on one master do too. Arguments: ARGV[1] owner, ARGV[2] nonce,
-- ARGV[3] epoch, ARGV[4] seq, ARGV[5] value, ARGV[6] the history's TTL
-- (ms), ARGV[7] its longest length. Each entry is published on channel K,
-- as "e:epoch-seq", so that observers read at once.

-- appendEntry adds field and value to the history (keys) as ARGV's entry,
-- where the Lock of owner and nonce holds the lock. Where the Lock's
-- token there is lower than the epoch (an acquire's fence round did not
-- reach this master), it raises it, as fence does. It replies 1 where the
-- entry is there, 0 where the Lock does not hold the lock.
local function appendEntry(keys, argv, field, value)
  local holds, token, waited, holder = parse(redis.call('GET', keys[1]))
  if holder ~= holderOf(argv[2], argv[1]) or less(argv[3], token) then return 0 end
  if less(token, argv[3]) then
    redis.call('SET', keys[1], valueOf(holds, argv[3], waited, holder), 'KEEPTTL')
  end
  local id = argv[3] .. '-' .. argv[4]
  local last = redis.call('XREVRANGE', keys[2], '+', '-', 'COUNT', 1)[1]
  if last then
    local epoch, seq = last[1]:match('^(%d+)-(%d+)$')
    if last[1] == id then return 1 end -- the same call, landed twice
    if less(argv[3], epoch) or epoch == argv[3] and less(argv[4], seq) then
      return redis.error_reply('history ' .. keys[2] .. ' is at ' .. last[1] .. ', past ' .. id)
    end
  end
  redis.call('XADD', keys[2], 'MAXLEN', argv[7], id, field, value)
  lengthen(keys[2], tonumber(argv[6]))
  redis.call('PUBLISH', keys[1], 'e:' .. id)
  return 1
end

--- elect_record @value @tokens @ttl @election
-- A leader's win (seq 0) or proclaim: its value, appended to the history.
return appendEntry(KEYS, ARGV, 'v', ARGV[5])

--- elect_resign @value @tokens @ttl @election
-- A leader's resignation, appended to the history before its release.
return appendEntry(KEYS, ARGV, 'r', '')

--- elect_read
-- Reads an election (see @election), changing nothing. It replies the
-- lock's value (nil for none), its PTTL, the history's entries after ID
-- ARGV[1] (none where ARGV[1] is empty), at most ARGV[2] of them, and the
-- history's last entry (nil for none).
local entries = {}
if ARGV[1] ~= '' then
  entries = redis.call('XRANGE', KEYS[2], '(' .. ARGV[1], '+', 'COUNT', ARGV[2])
end
local last = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)[1] or false
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), entries, last}

--- @permits
-- Semaphores (package semaphore). The semaphore named n keeps its permits
-- in S, K..':s' (KEYS[1]), a sorted set of nonce -> expiry (ms, on the
-- master's clock); in S..':n', a hash of slot -> nonce; and its fencing
-- counter in S..':t', as decimal text. All hash to K's slot. Each permit
-- is a Lock of one hold: ARGV as above, except ARGV[5], the capacity the
-- acquire was given. Its nonce starts with its slot and '/'. A master
-- admits a permit for slot s and capacity c only where s < c, no live
-- permit holds s here, and fewer than c live permits are here. Releases
-- publish the nonce on channel S, so that a waiter retries at once.

-- trimPermits drops the expired permits of key and returns the master's
-- clock in milliseconds. Their slots are free once they are gone.
local function trimPermits(key)
  local t = redis.call('TIME')
  local now = t[1] * 1000 + math.floor(t[2] / 1000)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  return now
end

-- freeSlot returns -2 - s for the first slot s after slot, in turn,
-- below capacity that no live permit of key holds, or 0 for none. Fewer
-- than capacity permits must be live: then it reads at most that many.
local function freeSlot(key, slot, capacity)
  local taken = {}
  for _, nonce in ipairs(redis.call('ZRANGE', key, 0, -1)) do
    taken[tonumber(nonce:match('^(%d+)/') or -1)] = true
  end
  for k = 1, capacity - 1 do
    local s = (slot + k) % capacity
    if not taken[s] then return -2 - s end
  end
  return 0
end

-- extendPermit extends the permit of nonce in key for ttl (ms), never
-- shorter (see @ttl), and the keys beside it. It replies 1 where the
-- permit is live, else 0.
local function extendPermit(key, ttl, nonce)
  local now = trimPermits(key)
  if not redis.call('ZSCORE', key, nonce) then return 0 end
  redis.call('ZADD', key, 'XX', 'GT', now + ttl, nonce)
  lengthen(key, ttl)
  lengthen(key .. ':n', ttl)
  if redis.call('EXISTS', key .. ':t') == 1 then lengthen(key .. ':t', ttl) end
  return 1
end

--- sem_acquire @tokens @ttl @permits
-- Admits the permit of nonce ARGV[6] for its slot under capacity
-- ARGV[5] (see @permits). Replies its token (1 when not fencing). Where
-- another live permit holds the slot, and fewer than the capacity are
-- live, it replies -2 - s, s a slot free here (see freeSlot): the next
-- attempt need not try the slots in turn. Else it replies 0. A permit
-- is never re-entered, and a marker of its nonce refuses it.
local slot, capacity = ARGV[6]:match('^(%d+)/'), tonumber(ARGV[5])
if not slot or tonumber(slot) >= capacity or tonumber(ARGV[3]) ~= 1 then return 0 end
-- Full is the common refusal under contention: it counts the live
-- permits and changes nothing. An admission trims the expired ones.
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
if redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf') >= capacity then return 0 end
if redis.call('EXISTS', KEYS[1] .. ':gone:' .. ARGV[6]) == 1 then return 0 end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now) -- as trimPermits
local slots = KEYS[1] .. ':n'
local other = redis.call('HGET', slots, slot)
if other and redis.call('ZSCORE', KEYS[1], other) then
  if other == ARGV[6] then return 0 end -- landed twice
  return freeSlot(KEYS[1], tonumber(slot), capacity)
end
local ttl, token = tonumber(ARGV[2]), '1'
if ARGV[4] ~= '0' then
  -- Fails before the permit is written.
  local counter = redis.call('GET', KEYS[1] .. ':t')
  if counter and not counter:match('^%d+$') then
    return redis.error_reply('fencing counter of ' .. KEYS[1] .. ' is not decimal')
  end
  local err
  token, err = nextToken(counter or nil, ARGV[4], ttl)
  if not token then
    return redis.error_reply('fencing counter ' .. counter .. ' of ' .. KEYS[1] .. ' cannot be incremented: ' .. err)
  end
  redis.call('SET', KEYS[1] .. ':t', token, 'PX', atLeast(KEYS[1] .. ':t', ttl))
end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[6])
redis.call('HSET', slots, slot, ARGV[6])
lengthen(KEYS[1], ttl)
lengthen(slots, ttl)
return token

--- sem_fence @tokens @ttl @permits
-- Raises the counter to the token ARGV[3] where this permit is live, so
-- that every later token is larger.
trimPermits(KEYS[1])
if not redis.call('ZSCORE', KEYS[1], ARGV[6]) then return 0 end
local c = KEYS[1] .. ':t'
local counter = redis.call('GET', c)
if not counter or less(counter, ARGV[3]) then
  redis.call('SET', c, ARGV[3], 'PX', atLeast(c, tonumber(ARGV[2])))
end
return 1

--- sem_extend @ttl @permits
return extendPermit(KEYS[1], tonumber(ARGV[2]), ARGV[6])

--- sem_extend_many @ttl @permits
-- sem_extend for many permits at once (see extend_many): KEYS are each
-- permit's S, ARGV three arguments per permit.
local replies = {}
for i = 1, #KEYS do
  local a = 3 * i - 2
  replies[i] = extendPermit(KEYS[i], tonumber(ARGV[a + 1]), ARGV[a + 2])
end
return replies

--- sem_release @ttl @permits
-- Drops this permit, frees its slot and publishes its nonce. Where the
-- permit is not found, it leaves the marker (ARGV[7] "1"), as release
-- does.
trimPermits(KEYS[1])
local function mark()
  if ARGV[7] then redis.pcall('SET', KEYS[1] .. ':gone:' .. ARGV[6], '1', 'PX', ARGV[2]) end
end
if redis.call('ZREM', KEYS[1], ARGV[6]) == 0 then
  mark()
  return 0
end
local slots, slot = KEYS[1] .. ':n', ARGV[6]:match('^(%d+)/')
if slot and redis.call('HGET', slots, slot) == ARGV[6] then redis.call('HDEL', slots, slot) end
if ARGV[7] == '2' then mark() end
redis.call('PUBLISH', KEYS[1], ARGV[6])
return 1

--- @queue
-- Fair locks (package mutex, Fair). The fair lock named n is the exclusive
-- lock named n, K, plus a queue of waiters: Q, K..':q', a sorted set of
-- waiter id -> ticket; Q..'e', a sorted set of waiter id -> expiry (ms, on
-- the master's clock); Q..'c', the ticket counter. All hash to K's slot.
-- The order is (ticket, id), the sorted set's own. A waiter's id is the
-- owner of the Lock it takes. Each key lives at least as long as its
-- latest expiry. The counter is never deleted nor lowered: it expires one
-- waiter TTL after the last renewal, even where no entry is left. A grant
-- drops its waiter's entry, and a failed attempt's undo may land much
-- later (after a cut); a counter deleted with the emptied queue would
-- meanwhile restart below the tickets of waiters still queued. Tickets
-- stay far below 2^53, exact as scores. The id of the waiter that is next
-- is published on channel Q, so that it alone retries at once.

-- headOf returns the id of the first waiter of queue q, or nil.
local function headOf(q)
  return redis.call('ZRANGE', q, 0, 0)[1]
end

-- trimQueue drops the waiters of q whose expiry passed and returns the
-- master's clock in ms. Where it drops the head it publishes the next one:
-- a waiter that died is followed at its expiry, not at a timer's.
local function trimQueue(q)
  local t = redis.call('TIME')
  local now = t[1] * 1000 + math.floor(t[2] / 1000)
  local expired = redis.call('ZRANGEBYSCORE', q .. 'e', '-inf', now)
  if #expired == 0 then return now end
  local head = headOf(q)
  redis.call('ZREMRANGEBYSCORE', q .. 'e', '-inf', now)
  for i = 1, #expired, 1000 do -- unpack's stack holds a few thousand
    redis.call('ZREM', q, unpack(expired, i, math.min(i + 999, #expired)))
  end
  local next = headOf(q)
  if next and next ~= head then redis.call('PUBLISH', q, next) end
  return now
end

-- keep raises the counter of q to ticket (a number), and makes it live at
-- least ttl (ms) more: later enqueues here get larger tickets meanwhile.
local function keep(q, ticket, ttl)
  local c = q .. 'c'
  if (tonumber(redis.call('GET', c)) or 0) < ticket then redis.call('SET', c, ticket, 'KEEPTTL') end
  lengthen(c, ttl)
end

-- place queues waiter id under ticket (a number) until now + ttl (ms), in
-- place of any entry it had, and keeps the counter for it.
local function place(q, id, ticket, ttl, now)
  redis.call('ZADD', q, ticket, id)
  redis.call('ZADD', q .. 'e', now + ttl, id)
  lengthen(q, ttl)
  lengthen(q .. 'e', ttl)
  keep(q, ticket, ttl)
end

-- heldBy reports whether the lock K is held by owner: a grant dropped
-- owner's entry, which a late renewal brings back only where the lock
-- would not outlast it (see fair_renew).
local function heldBy(k, owner)
  local _, _, _, holder = parse(redis.call('GET', k))
  return holder ~= nil and ownerOf(holder) == owner
end

--- fair_enqueue @value @ttl @queue
-- Queues waiter ARGV[1] for ARGV[2] ms under this master's next ticket,
-- and replies the ticket.
local q = KEYS[1] .. ':q'
local now = trimQueue(q)
local ticket = redis.call('INCR', q .. 'c')
place(q, ARGV[1], ticket, tonumber(ARGV[2]), now)
return ticket

--- fair_renew @value @ttl @queue
-- Keeps waiter ARGV[1] of ticket ARGV[3] queued for ARGV[2] ms more; where
-- it is missing (the enqueue missed this master, or it lost the entry) it
-- is queued again, unless it holds the lock for those ms at least. There
-- it keeps only the counter: the master counts toward the renewal, so
-- later tickets must still be larger here, and its lock refuses them
-- meanwhile. A lock that expires sooner (a failed attempt's grant whose
-- undo never landed) would leave the master granting later tickets while
-- the renewal still counts it. Replies 1 + the live waiters ahead of it.
-- The enqueue's second round, where tickets differed, is one.
local q = KEYS[1] .. ':q'
local now = trimQueue(q)
local ticket, ttl = tonumber(ARGV[3]), tonumber(ARGV[2])
if not redis.call('ZSCORE', q, ARGV[1]) and heldBy(KEYS[1], ARGV[1]) and redis.call('PTTL', KEYS[1]) >= ttl then
  keep(q, ticket, ttl)
  return 1
end
place(q, ARGV[1], ticket, ttl, now)
return redis.call('ZRANK', q, ARGV[1]) + 1

--- fair_leave @value @ttl @queue
-- Drops waiter ARGV[1]. Where it was first, the next one is published.
-- Replies 1.
local q = KEYS[1] .. ':q'
trimQueue(q)
local head = headOf(q)
redis.call('ZREM', q, ARGV[1])
redis.call('ZREM', q .. 'e', ARGV[1])
local next = headOf(q)
if head == ARGV[1] and next then redis.call('PUBLISH', q, next) end
return 1

--- fair_acquire @value @tokens @readers @ttl @acquireLock @queue
-- acquire, for waiter ARGV[1] of ticket ARGV[5] ("ticket:waiter TTL"): a
-- new lock is granted only where no live waiter is ahead of the ticket
-- here, and refused with -2 where one is, 0 otherwise (the lock is held):
-- the waiter learns whether to try at the next release or wait to be
-- published as next. Mutual exclusion is acquire's: the queue only
-- refuses more. The grant drops the waiter's entry. A re-entry is
-- acquire's.
if ARGV[3] ~= '1' then return acquireLock(KEYS, ARGV) end
local q = KEYS[1] .. ':q'
trimQueue(q)
local ticket = tonumber(ARGV[5]:match('^(%d+):'))
local head = redis.call('ZRANGE', q, 0, 0, 'WITHSCORES')
if head[1] and head[1] ~= ARGV[1] then
  local score = tonumber(head[2])
  if score < ticket or score == ticket and head[1] < ARGV[1] then return -2 end
end
local reply = acquireLock(KEYS, ARGV)
if type(reply) == 'string' or type(reply) == 'number' and reply > 0 then
  redis.call('ZREM', q, ARGV[1])
  redis.call('ZREM', q .. 'e', ARGV[1])
end
return reply

--- fair_undo @value @tokens @ttl @releaseLock @queue
-- release, as the undo of a failed fair_acquire: where the lock goes, the
-- waiter's entry comes back (ARGV[5] "ticket:waiter TTL"), so that no
-- waiter behind it passes it meanwhile. Only there: an undo that finds
-- none of its Lock's hold did not follow a grant that dropped the entry.
-- It may come late, after the waiter left or took the lock with a later
-- attempt, and must not queue it again.
local reply = releaseLock(KEYS, ARGV)
if ARGV[3] == '0' and (reply == 1 or reply == 2) then
  local ticket, ttl = ARGV[5]:match('^(%d+):(%d+)$')
  local q = KEYS[1] .. ':q'
  place(q, ARGV[1], tonumber(ticket), tonumber(ttl), trimQueue(q))
end
return reply

--- fair_release @value @tokens @releaseLock @queue
-- release. The last one drops the holder's entry, which its grant left
-- where this master refused it, so that it holds no one back. It
-- publishes the id of the next live waiter on Q where the lock went or
-- that entry was first.
local reply = releaseLock(KEYS, ARGV)
if ARGV[3] == '0' then
  local q = KEYS[1] .. ':q'
  trimQueue(q)
  local first = headOf(q) == ARGV[1]
  if redis.call('ZREM', q, ARGV[1]) == 1 then redis.call('ZREM', q .. 'e', ARGV[1]) end
  local next = headOf(q)
  if next and (first or type(reply) == 'number' and reply > 0) then redis.call('PUBLISH', q, next) end
end
return reply
