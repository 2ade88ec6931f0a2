-- wrk script: a steady, paced stream of device posts (batches of BATCH conditions
-- with increasing timestamps) to the registered ISUs listed in UUID_FILE, one UUID
-- a line, so every batch gives its ISU a newer latest condition and the trend changes.
-- Each connection waits DELAY_MS between posts: the load is realistic, not a flood
-- that would steal the CPU from the node being measured.
local uuids = {}
for line in io.lines(os.getenv("UUID_FILE")) do
  if line ~= "" then table.insert(uuids, line) end
end
local batch = tonumber(os.getenv("BATCH") or "10")
local delay_ms = tonumber(os.getenv("DELAY_MS") or "10")
local next_id = 0

function setup(thread)
  thread:set("tid", next_id)
  next_id = next_id + 1
end

function init(args)
  counter = 0
  sequence = {}
  stride = tonumber(os.getenv("THREADS") or "1")
  conditions = {
    "is_dirty=false,is_overweight=false,is_broken=false",
    "is_dirty=true,is_overweight=false,is_broken=false",
    "is_dirty=true,is_overweight=true,is_broken=true",
  }
end

function delay()
  return delay_ms
end

function request()
  counter = counter + 1
  -- each ISU is posted to by one thread only, so its batches follow each other in time
  local index = (counter * stride + tid) % #uuids + 1
  local seq = (sequence[index] or 0) + 1
  sequence[index] = seq
  local base = 1628348400 + seq * batch * 60
  local items = {}
  for i = 1, batch do
    items[i] = string.format(
      '{"is_sitting":%s,"condition":"%s","message":"","timestamp":%d}',
      (i % 2 == 0) and "true" or "false", conditions[(counter + i) % 3 + 1], base + i * 60)
  end
  local body = "[" .. table.concat(items, ",") .. "]"
  return wrk.format("POST", "/api/condition/" .. uuids[index], { ["Content-Type"] = "application/json" }, body)
end
