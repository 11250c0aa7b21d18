-- Every Lua script redlock runs on a master. Each section starts with a line
-- "--- name" and runs until the next one; scripts.go splits them at start-up.
-- All scripts return an integer: 1 when the master agrees, 0 when it does not.

--- acquire
-- KEYS[1] lock key, ARGV[1] value, ARGV[2] TTL in milliseconds.
-- Takes the key only when it is free.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
return 0

--- extend
-- KEYS[1] lock key, ARGV[1] value, ARGV[2] TTL in milliseconds.
-- Sets a new TTL only where the key still holds our value; a missing key is
-- never re-created.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0

--- release
-- KEYS[1] lock key, ARGV[1] value.
-- Deletes the key only where it still holds our value; 1 means it was held.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
