-- Coordinator replicas: which one serves a public API request. Used only when the cluster
-- runs more than one coordinator (`upstream coordinator` then has a placeholder server and
-- `balancer_by_lua_block { isu_replicas.balance() }`).
--
-- Health. One nginx worker process asks every replica's `/healthz` every PROBE_EVERY
-- seconds (HTTP/1.0; PROBE_TIMEOUT_MS to connect, to send and to read) and keeps the answer in the
-- shared dictionary `isu_placement` for ANSWER_TTL seconds: "leader" (200, and it says it
-- leads), "up" (200), "starting" (any other status: not ready) or "down" (no connection,
-- no answer in time: dead, or stopped with its sockets open). A request failed on a replica
-- sets that replica aside for SET_ASIDE seconds, as `max_fails=1 fail_timeout=2s` did.
--
-- Time bounds. A connection to a replica gets CONNECT_TIMEOUT seconds (a host cut off
-- drops the handshake). A read (GET or HEAD) gets READ_TIMEOUT seconds for its answer,
-- then goes to the next replica (the locations' `proxy_next_upstream ... timeout`): a
-- replica stopped with its sockets open, or whose host went silent, holds the reads already
-- sent to it until its probe notices, and the clients (the benchmarker's, 1 s) would give
-- up long before nginx's 30 s. A loaded replica answers a read well inside the bound (the
-- bench's p99 under load on one shared core: 25-115 ms). Writes keep the locations' read
-- timeout: a sign-in or registration waits for a commit, through a takeover if need be,
-- and sent again elsewhere it would only wait for the same leader.
--
-- Choice. A request goes to the best-ranked replica not tried yet for it:
--   0  up, and not the leader for a request without a session
--   1  the leader, for a request without a session
--   2  starting, down, set aside, or not asked yet when others answered
-- and among equals by rendezvous hashing of its key (the session cookie, else the client's
-- address) with each replica's address: a client stays on one replica (monotonic reads:
-- each replica's trend is its own) while the set does not change, and when a replica goes
-- only that replica's clients move. Clients without a session (the trend's viewers,
-- sign-ins) are kept off the leader, which commits every write of the group: on a shared
-- machine, the trend's viewers on the leader lengthened every commit. When nothing was
-- asked yet (nginx just started), every replica ranks 0.
--
-- Cost. Each nginx worker keeps, per key, the replicas in the order of their hashes (at
-- most ORDERS_KEPT keys, then it starts again), and a copy of the shared answers and
-- set-asides at most STATES_FOR seconds old (its own set-asides at once): three md5s and
-- six dictionary reads per request made the balancer a tenth of nginx's CPU.
--
-- The renderer pastes this file into `init_by_lua_block` and calls `isu_replicas.init`
-- (with the replicas) only when there are several; `isu_replicas.start_probes` runs in
-- `init_worker_by_lua_block` and does nothing without replicas.

isu_replicas = (function()
  local M = {}

  local dict = ngx.shared.isu_placement
  local PROBE_EVERY = 0.25
  local PROBE_TIMEOUT_MS = 250
  local ANSWER_TTL = 1.5
  local SET_ASIDE = 2
  local CONNECT_TIMEOUT = 0.5
  local READ_TIMEOUT = 0.5
  local ORDERS_KEPT = 20000
  local STATES_FOR = 0.05

  -- "host:port" of each replica, in the configured order, and each split once.
  local replicas = {}
  local hosts, ports = {}, {}
  local cookie_var = nil

  -- This worker's copies (see "Cost" above).
  local orders, orders_kept = {}, 0
  local states, asides, any_answer, states_at = {}, {}, false, nil

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
    cookie_var = "cookie_" .. options.cookie
  end

  -- The state one `/healthz` exchange shows.
  local function probe(address)
    local sock = ngx.socket.tcp()
    sock:settimeouts(PROBE_TIMEOUT_MS, PROBE_TIMEOUT_MS, PROBE_TIMEOUT_MS)
    local ok = sock:connect(hosts[address], ports[address])
    if not ok then
      return "down"
    end
    ok = sock:send("GET /healthz HTTP/1.0\r\nHost: " .. address .. "\r\n\r\n")
    if not ok then
      sock:close()
      return "down"
    end
    local answer, err, partial = sock:receive("*a")
    sock:close()
    answer = answer or (err == "closed" and partial) or nil
    if not answer then
      return "down"
    end
    if answer:match("^HTTP/%d%.%d (%d+)") ~= "200" then
      return "starting"
    end
    if answer:find('"leader":true', 1, true) then
      return "leader"
    end
    return "up"
  end

  local function probe_all(premature)
    if premature then
      return
    end
    local threads = {}
    for index, address in ipairs(replicas) do
      threads[index] = ngx.thread.spawn(probe, address)
    end
    for index, address in ipairs(replicas) do
      local ok, state = ngx.thread.wait(threads[index])
      dict:set("replica:" .. address, ok and state or "down", ANSWER_TTL)
    end
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

  -- The rank of a replica whose probe answered `state` (nil: none kept).
  local function rank(address, state, with_session)
    if asides[address] then
      return 2
    end
    if state == nil then
      return any_answer and 2 or 0
    end
    if state == "up" then
      return 0
    end
    if state == "leader" then
      return with_session and 0 or 1
    end
    return 2
  end

  -- The replicas by rendezvous hashing of `key`: the highest weight first. md5, not crc32:
  -- crc32 is affine, so for keys of one length the comparison of two replicas' weights
  -- turns on one bit that does not depend on the key, and one replica of three would win
  -- about half of the clients.
  local function order_of(key)
    local order = orders[key]
    if order then
      return order
    end
    local weights = {}
    order = {}
    for index, address in ipairs(replicas) do
      weights[address] = tonumber(ngx.md5(key .. "@" .. address):sub(1, 8), 16)
      order[index] = address
    end
    table.sort(order, function(a, b)
      return weights[a] > weights[b]
    end)
    if orders_kept >= ORDERS_KEPT then
      orders, orders_kept = {}, 0
    end
    orders[key] = order
    orders_kept = orders_kept + 1
    return order
  end

  -- This worker's copy of the probes' answers and the set-asides, read again once older
  -- than STATES_FOR.
  local function refresh_states()
    local now = ngx.now()
    if states_at and now - states_at < STATES_FOR then
      return
    end
    states_at = now
    any_answer = false
    for _, address in ipairs(replicas) do
      local state = dict:get("replica:" .. address)
      states[address] = state
      any_answer = any_answer or state ~= nil
      asides[address] = dict:get("aside:" .. address) or nil
    end
  end

  -- The replica for this request, among those it has not tried yet: the best rank, and
  -- among equals the first in the key's order.
  local function choose(tried)
    local key = ngx.var[cookie_var]
    local with_session = key ~= nil and key ~= ""
    if not with_session then
      key = ngx.var.remote_addr or ""
    end
    refresh_states()
    local best, best_rank
    for _, address in ipairs(order_of(key)) do
      if not tried[address] then
        local r = rank(address, states[address], with_session)
        if best == nil or r < best_rank then
          best, best_rank = address, r
        end
      end
    end
    return best
  end

  -- balancer_by_lua: the first try, or the next one after a failure (proxy_next_upstream).
  function M.balance()
    local balancer = require("ngx.balancer")
    local ctx = ngx.ctx
    local tried = ctx.isu_replicas_tried
    if tried then
      -- A retry: the replica tried last failed this request.
      dict:set("aside:" .. ctx.isu_replicas_last, true, SET_ASIDE)
      asides[ctx.isu_replicas_last] = true
    else
      tried = {}
      ctx.isu_replicas_tried = tried
      balancer.set_more_tries(#replicas - 1)
    end
    local address = choose(tried)
    if not address then
      return ngx.exit(502)
    end
    tried[address] = true
    ctx.isu_replicas_last = address
    local method = ngx.var.request_method
    local read = (method == "GET" or method == "HEAD") and READ_TIMEOUT or nil
    local ok, err = balancer.set_timeouts(CONNECT_TIMEOUT, nil, read)
    if not ok then
      ngx.log(ngx.ERR, "replicas: cannot set the timeouts: ", err)
    end
    ok, err = balancer.set_current_peer(hosts[address], ports[address])
    if not ok then
      ngx.log(ngx.ERR, "replicas: cannot send to ", address, ": ", err)
      return ngx.exit(502)
    end
  end

  return M
end)()
