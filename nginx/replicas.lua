-- Coordinator replicas: which one serves the public API. Used only when the cluster runs
-- more than one coordinator.
--
-- The renderer writes one upstream per replica, `coordinator_replica_<i>` (i from 1, in the
-- configured order): replica i first, every other replica a `backup`. nginx balances inside
-- the upstream itself (no Lua runs in the balancer): a request goes to replica i, and one
-- that fails there (no connection, a read not answered in time, a 503) goes to a backup
-- where that is safe (the locations' `proxy_next_upstream`). nginx never sets a replica
-- aside on its own (`max_fails=0`): one slow answer (a read waiting for its client's write
-- during a takeover) would send that worker's clients round the backups for a while, and
-- the probes below move them within three quarters of a second anyway. Each location of
-- the coordinator picks the upstream with `set_by_lua_block ... isu_replicas.upstream()`.
--
-- One replica serves every public request at a time: the preferred one. The replicas are
-- there so that the control plane survives the loss of one, not for capacity (the cells are
-- that): one replica answers what one coordinator answers. On a shared machine, requests
-- spread over three processes cost about a tenth more CPU each than on one, and a Lua
-- balancer run for every request was a tenth of nginx's CPU. One replica at a time also keeps
-- a client's reads monotonic (each replica's trend is its own, and may be a push interval
-- behind another's) and its own writes in sight (the replica applied them before answering)
-- as long as the clients stay where they are, so they move only when they must.
--
-- Health. One nginx worker process asks every replica's `/healthz` every PROBE_EVERY
-- seconds (HTTP/1.0; PROBE_TIMEOUT_MS to connect, to send and to read). The answer is
-- "leader" (200, and it says it leads), "up" (200), "starting" (any other status: not
-- ready), "late" (a step timed out: stopped with its sockets open, cut off, or only slow)
-- or "down" (no connection: dead). Each change of a replica's state, and of the preferred
-- replica, is a warning in the error log, with the reason of a "late", "down" or
-- "starting".
--
-- Choice. After each round of probes, that worker keeps the preferred replica while it is
-- "up", or "late" for the first time after "up" (on a loaded machine one probe can miss
-- its time: moving every client for it could show them an older trend; a stopped replica
-- is late twice, within two rounds), and otherwise prefers the first, in the configured
-- order, of the best rank:
--   0  up (it does not lead)
--   1  the leader (it commits every write of the group: on a shared machine, the public
--      requests on it lengthened every commit)
--   2  starting, or not answered
--   3  late or down
-- and stores its index in the shared dictionary `isu_placement`. So a replica that comes
-- back, or that loses its leadership, gets no clients until the preferred one must be
-- left. Until the first round ends (nginx just started), the first replica is preferred.
--
-- Cost. Each nginx worker keeps the preferred upstream's name, read again from the shared
-- dictionary at most every STATES_FOR seconds: a request costs a comparison of two numbers.
--
-- The renderer pastes this file into `init_by_lua_block` and calls `isu_replicas.init`
-- (with the replicas) only when there are several; `isu_replicas.start_probes` runs in
-- `init_worker_by_lua_block` and does nothing without replicas.

isu_replicas = (function()
  local M = {}

  local dict = ngx.shared.isu_placement
  local PROBE_EVERY = 0.25
  local PROBE_TIMEOUT_MS = 250
  local STATES_FOR = 0.05
  local UPSTREAM_PREFIX = "coordinator_replica_"

  -- "host:port" of each replica, in the configured order, and each split once.
  local replicas = {}
  local hosts, ports = {}, {}

  -- This worker's choice (see "Cost" above).
  local preferred, chosen_at = UPSTREAM_PREFIX .. "1", nil

  function M.init(options)
    replicas = {}
    for index, address in ipairs(options.replicas) do
      local host, port = address:match("^(.+):(%d+)$")
      if not host then
        error("replicas: not host:port: " .. tostring(address))
      end
      replicas[index] = address
      hosts[address], ports[address] = host, tonumber(port)
    end
  end

  -- A probe's step that failed: "late" when it timed out, else "down"; and why.
  local function failed(step, err)
    return err == "timeout" and "late" or "down", step .. ": " .. tostring(err)
  end

  -- The state one `/healthz` exchange shows, and why it is "late", "down" or "starting"
  -- (for the log).
  local function probe(address)
    local sock = ngx.socket.tcp()
    sock:settimeouts(PROBE_TIMEOUT_MS, PROBE_TIMEOUT_MS, PROBE_TIMEOUT_MS)
    local ok, err = sock:connect(hosts[address], ports[address])
    if not ok then
      return failed("connect", err)
    end
    ok, err = sock:send("GET /healthz HTTP/1.0\r\nHost: " .. address .. "\r\n\r\n")
    if not ok then
      sock:close()
      return failed("send", err)
    end
    local answer, partial
    answer, err, partial = sock:receive("*a")
    sock:close()
    answer = answer or (err == "closed" and partial) or nil
    if not answer then
      return failed("read", err)
    end
    local status = answer:match("^HTTP/%d%.%d (%d+)")
    if status ~= "200" then
      return "starting", "status " .. tostring(status)
    end
    if answer:find('"leader":true', 1, true) then
      return "leader"
    end
    return "up"
  end

  local RANKS = { up = 0, leader = 1, starting = 2, late = 3, down = 3 }

  -- The preferred replica's index after a round of probes found `states`, the round before
  -- `previous`, with `current` preferred until then (see "Choice").
  local function choose(current, states, previous)
    if current and current <= #replicas then
      local state = states[current]
      if state == "up" or (state == "late" and previous[current] == "up") then
        return current
      end
    end
    local best, best_rank = 1, nil
    for index = 1, #replicas do
      local rank = RANKS[states[index]] or 2
      if best_rank == nil or rank < best_rank then
        best, best_rank = index, rank
      end
    end
    return best
  end

  -- What the last round found of each replica, to log the changes only.
  local last_states = {}

  local function probe_all(premature)
    if premature then
      return
    end
    local threads, states = {}, {}
    for index, address in ipairs(replicas) do
      threads[index] = ngx.thread.spawn(probe, address)
    end
    for index, address in ipairs(replicas) do
      local ok, state, reason = ngx.thread.wait(threads[index])
      if not ok then
        state, reason = "down", tostring(state)
      end
      states[index] = state
      if state ~= last_states[index] then
        ngx.log(ngx.WARN, "replicas: replica ", index, " (", address, ") is ", state,
          reason and (" (" .. reason .. ")") or "", ", was ", last_states[index] or "not probed yet")
      end
    end
    local previous = last_states
    last_states = states
    local before = dict:get("preferred")
    local chosen = choose(before, states, previous)
    if chosen ~= before then
      ngx.log(ngx.WARN, "replicas: clients go to replica ", chosen, " (", replicas[chosen], ", ",
        states[chosen], ") instead of ", before or "the first")
    end
    dict:set("preferred", chosen)
  end

  -- init_worker: the first worker process asks the replicas (the others read the answers).
  function M.start_probes()
    if #replicas < 2 or ngx.worker.id() ~= 0 then
      return
    end
    local ok, err = ngx.timer.every(PROBE_EVERY, probe_all)
    if not ok then
      ngx.log(ngx.ERR, "replicas: cannot start the health probes: ", err)
    end
    ngx.timer.at(0, probe_all)
  end

  -- set_by_lua: the name of the upstream whose first server is the preferred replica.
  function M.upstream()
    local now = ngx.now()
    if chosen_at == nil or now - chosen_at >= STATES_FOR then
      chosen_at = now
      local index = dict:get("preferred")
      if not index or index > #replicas then
        index = 1
      end
      preferred = UPSTREAM_PREFIX .. index
    end
    return preferred
  end

  return M
end)()
