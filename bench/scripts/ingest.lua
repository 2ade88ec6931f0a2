-- wrk script: device posts of realistic batches (10 conditions, increasing
-- timestamps per ISU) spread over ISUS ISUs whose UUIDs start with "0"
-- (worker A's shard). Used for both the worker and the return-202 baseline.
local isus = tonumber(os.getenv("ISUS") or "100")
local batch = tonumber(os.getenv("BATCH") or "10")
-- each run (and each side of it) posts newer timestamps than the previous ones
local epoch = tonumber(os.getenv("EPOCH") or "0")
local threads = {}
local next_id = 0

function setup(thread)
  thread:set("tid", next_id)
  next_id = next_id + 1
  table.insert(threads, thread)
end

function init(args)
  counter = 0
  sequence = {}
  stride = tonumber(os.getenv("THREADS") or "2")
  messages = { "今日も元気に座られています", "少し汚れが気になります", "重さに耐えています", "" }
  conditions = {
    "is_dirty=false,is_overweight=false,is_broken=false",
    "is_dirty=true,is_overweight=false,is_broken=false",
    "is_dirty=false,is_overweight=true,is_broken=false",
  }
end

function request()
  counter = counter + 1
  local isu = (counter * stride + tid) % isus
  local uuid = string.format("0%07x-0000-4000-8000-000000000000", isu)
  -- each ISU is posted to by one thread only; its batches follow each other in time
  local seq = (sequence[isu] or 0) + 1
  sequence[isu] = seq
  local base = 1628348400 + epoch * 1000000000 + seq * batch * 60
  local items = {}
  for i = 1, batch do
    local k = (counter + i) % 3 + 1
    items[i] = string.format(
      '{"is_sitting":%s,"condition":"%s","message":"%s","timestamp":%d}',
      (i % 2 == 0) and "true" or "false", conditions[k], messages[(counter + i) % 4 + 1], base + i * 60)
  end
  local body = "[" .. table.concat(items, ",") .. "]"
  return wrk.format("POST", "/api/condition/" .. uuid, { ["Content-Type"] = "application/json" }, body)
end
