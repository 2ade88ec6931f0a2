-- The router's placement map inside nginx: the coordinator hands nginx a new map version
-- through the control server, without a reload, and every nginx worker routes by it from
-- its next request on.
--
-- The map lives in the shared dictionary `isu_placement` (one copy for every worker
-- process, kept across a graceful reload): `map` is its text, `version` and `lineage` its
-- version and history, `serial` counts the maps stored. Each worker keeps its own parsed
-- copy and parses the text again when `serial` changes, so a request costs one dictionary
-- read and two table lookups. The text is the versioned map
-- file (`shared::router::map_text` writes it):
--
--   version 17
--   lineage 3f2a...                the map's history (optional, default 0): versions are
--                                  compared within one lineage; another lineage replaces
--   cell 0 a                       one line per cell, ids from 0 in order
--   cell 1 b
--   slots 0101...                  the cell id of each slot 00..ff: 256 hex digits, or
--                                  512 (two a slot) when the map has more than 16 cells
--   pin 0b104b95-...-89da717b9667 b
--
-- nginx starts (and reloads) from the map file on disk, never from a default: the file is
-- written before every update, so it holds the newest map. A file nginx cannot read at its
-- first start stops it with the reason; at a reload the map in memory is kept.
--
-- The renderer pastes this file into `init_by_lua_block` (the master runs it once; every
-- worker inherits the module) and calls `isu_router.init`.

isu_router = (function()
  local M = {}

  local dict = ngx.shared.isu_placement
  local SLOTS = 256

  -- Configured cells: name -> upstream name (the upstreams of nginx.conf).
  local upstream_of = {}
  -- Where a request goes when no map can be used: any cell forwards what it does not own.
  local fallback_upstream = nil
  local secret = nil

  -- This worker's parsed copy of the map.
  local cached_serial = nil
  local failed_serial = nil
  local slot_upstream = {}
  local pin_upstream = nil

  local function read_file(path)
    local file, err = io.open(path, "rb")
    if not file then
      return nil, err
    end
    local text = file:read("*a")
    file:close()
    return text
  end

  -- Parses and checks a map text; the map or nil and a short reason.
  local function parse(text)
    if type(text) ~= "string" or text == "" then
      return nil, "empty map"
    end
    if text:find("\r", 1, true) then
      return nil, "carriage return in the map: lines end with LF only"
    end
    local map = { cells = {}, pins = {}, lineage = "0" }
    local lineage_seen = false
    local number = 0
    for line in text:gmatch("[^\n]+") do
      number = number + 1
      if line:byte(1) ~= 35 then -- '#': a comment
        local key, rest = line:match("^(%l+) (.+)$")
        if key == "version" then
          if map.version or not rest:match("^%d+$") or #rest > 15 then
            return nil, "line " .. number .. ": bad version"
          end
          map.version = tonumber(rest)
        elseif key == "lineage" then
          if lineage_seen or not rest:match("^[0-9a-f]+$") or #rest > 16 then
            return nil, "line " .. number .. ": bad lineage"
          end
          lineage_seen = true
          map.lineage = rest
        elseif key == "cell" then
          local id, name = rest:match("^(%d+) ([%l%d-]+)$")
          if not id or tonumber(id) ~= #map.cells or #name > 32 then
            return nil, "line " .. number .. ": bad cell (want: cell ID NAME, ids from 0 in order)"
          end
          if not upstream_of[name] then
            return nil, "unknown cell " .. name .. " (this router's cells: " .. M.cell_names() .. ")"
          end
          map.cells[#map.cells + 1] = name
        elseif key == "slots" then
          local width = #rest / SLOTS
          if map.slots or (width ~= 1 and width ~= 2) or rest:find("[^0-9a-f]") then
            return nil, "line " .. number .. ": slots wants 256 lowercase hex digits (512 past 16 cells)"
          end
          map.slots = {}
          for slot = 1, SLOTS do
            map.slots[slot] = tonumber(rest:sub((slot - 1) * width + 1, slot * width), 16)
          end
        elseif key == "pin" then
          local uuid, name = rest:match("^([%w-]+) ([%l%d-]+)$")
          if not uuid or #uuid > 64 then
            return nil, "line " .. number .. ": bad pin (want: pin UUID CELL)"
          end
          map.pins[uuid:lower()] = name
        else
          return nil, "line " .. number .. ": unknown line"
        end
      end
    end
    if not map.version or map.version < 1 then
      return nil, "no version"
    end
    if #map.cells == 0 then
      return nil, "no cell"
    end
    if not map.slots then
      return nil, "no slots"
    end
    for slot = 1, SLOTS do
      local id = map.slots[slot]
      if id >= #map.cells then
        return nil, string.format("slot %02x names cell id %d: the map has %d cells", slot - 1, id, #map.cells)
      end
    end
    for uuid, name in pairs(map.pins) do
      local known = false
      for _, cell in ipairs(map.cells) do
        known = known or cell == name
      end
      if not known then
        return nil, "pin " .. uuid .. " names cell " .. name .. ", which the map does not have"
      end
    end
    return map
  end

  -- This worker's copy, from the dictionary's text. A version that does not parse is
  -- logged once and not tried again (the last good copy, or the fallback, routes).
  local function refresh(serial)
    if serial == failed_serial then
      return
    end
    local text = dict:get("map")
    local map, err = parse(text)
    if not map then
      failed_serial = serial
      ngx.log(ngx.ERR, "router: the shared map does not parse: ", err)
      return
    end
    for slot = 1, SLOTS do
      slot_upstream[slot - 1] = upstream_of[map.cells[map.slots[slot] + 1]]
    end
    local pins = nil
    for uuid, name in pairs(map.pins) do
      pins = pins or {}
      pins[uuid] = upstream_of[name]
    end
    pin_upstream = pins
    cached_serial = serial
  end

  function M.cell_names()
    local names = {}
    for name in pairs(upstream_of) do
      names[#names + 1] = name
    end
    table.sort(names)
    return table.concat(names, " ")
  end

  -- A map text without its comment lines: two texts of one map compare equal.
  local function body(text)
    return (("\n" .. text):gsub("\n#[^\n]*", ""))
  end

  -- Stores a checked map unless the dictionary holds a newer one of the same lineage (a
  -- map of another lineage replaces it: a new history); nil and a reason (and an HTTP
  -- status) when it is refused.
  local function store(text, map)
    local current = dict:get("version")
    local same_lineage = (dict:get("lineage") or "0") == map.lineage
    if current and same_lineage and map.version < current then
      return nil, 409, "version " .. map.version .. " is older than the router's " .. current .. ": refused"
    end
    if current and same_lineage and map.version == current then
      if body(dict:get("map") or "") == body(text) then
        return "unchanged"
      end
      return nil, 409, "version " .. map.version .. " already holds another map: refused"
    end
    local ok, err = dict:set("map", text)
    if not ok then
      return nil, 507, "the shared dictionary cannot hold the map: " .. tostring(err)
    end
    dict:set("lineage", map.lineage)
    dict:set("version", map.version)
    dict:incr("serial", 1, 0)
    return "stored"
  end

  -- In the master, at every (re)start: the configured cells, the secret, the map file.
  function M.init(options)
    for _, name in ipairs(options.cells) do
      upstream_of[name] = "cell_" .. (name:gsub("-", "_"))
      fallback_upstream = fallback_upstream or upstream_of[name]
    end
    -- At a reload the dictionary keeps the map the workers route by: it must name only
    -- cells this configuration has, or the reload is refused (the old workers go on).
    local held = dict:get("map")
    if held then
      local _, held_err = parse(held)
      if held_err then
        error("router: the map nginx routes by cannot be used with this configuration (" .. held_err .. "): render with every cell of the map")
      end
    end
    local text, err = read_file(options.secret_file)
    text = text and text:match("^%s*(.-)%s*$")
    if not text or text == "" then
      error("router: cannot read the cluster secret from " .. options.secret_file .. ": " .. tostring(err or "empty"))
    end
    secret = text
    local map
    text, err = read_file(options.map_file)
    if text then
      map, err = parse(text)
    end
    if not map then
      if dict:get("version") then
        ngx.log(ngx.ERR, "router: the map file ", options.map_file, " was not loaded (", err, "): keeping version ", dict:get("version"))
        return
      end
      error("router: no usable placement map in " .. options.map_file .. ": " .. err)
    end
    -- Not while a worker stores a map handed over meanwhile (the file is never newer).
    if not dict:add("update-lock", true, 5) then
      return
    end
    local _, status, reason = store(text, map)
    dict:delete("update-lock")
    if status then
      ngx.log(ngx.WARN, "router: the map file ", options.map_file, " was not loaded: ", reason)
    end
  end

  -- set_by_lua: the upstream of the request's ISU ($isu_uuid, $isu_slot).
  function M.route()
    local serial = dict:get("serial")
    if serial ~= cached_serial then
      refresh(serial)
    end
    if pin_upstream then
      local uuid = ngx.var.isu_uuid
      local upstream = pin_upstream[uuid] or pin_upstream[uuid:lower()]
      if upstream then
        return upstream
      end
    end
    return slot_upstream[tonumber(ngx.var.isu_slot, 16)] or fallback_upstream
  end

  local function reply(status, text)
    ngx.status = status
    ngx.header["Content-Type"] = "text/plain"
    ngx.say(text)
    return ngx.exit(ngx.OK)
  end

  -- The same bytes, in time independent of where they differ.
  local function same(a, b)
    if #a ~= #b then
      return false
    end
    local diff = 0
    for i = 1, #a do
      diff = bit.bor(diff, bit.bxor(a:byte(i), b:byte(i)))
    end
    return diff == 0
  end

  -- The control server's guard: 401 without the cluster secret (`x-cluster-secret` or
  -- `Authorization: Bearer`), 403 with a wrong one; the status and its reason, or nothing
  -- when it is right.
  local function secret_refused()
    local presented = ngx.var.http_x_cluster_secret
    if not presented then
      local authorization = ngx.var.http_authorization
      presented = authorization and authorization:match("^Bearer (.+)$")
    end
    if not presented then
      return 401, "the cluster secret is required"
    end
    if not same(presented, secret) then
      return 403, "wrong cluster secret"
    end
  end

  -- access_by_lua of the control server's Prometheus locations: the secret, or no answer
  -- (the status ends the request here; ngx.OK would go on to the proxy).
  function M.require_secret()
    local status, reason = secret_refused()
    if status then
      ngx.status = status
      ngx.header["Content-Type"] = "text/plain"
      ngx.say(reason)
      return ngx.exit(status)
    end
  end

  -- content_by_lua of the control server's /map: GET answers the map nginx routes by,
  -- PUT (or POST) stores a newer one. Both want the cluster secret.
  function M.control()
    local status, reason = secret_refused()
    if status then
      return reply(status, reason)
    end
    local method = ngx.req.get_method()
    if method == "GET" or method == "HEAD" then
      ngx.header["X-Placement-Version"] = dict:get("version")
      ngx.header["X-Placement-Lineage"] = dict:get("lineage") or "0"
      ngx.header["Content-Type"] = "text/plain"
      ngx.print(dict:get("map") or "")
      return ngx.exit(ngx.OK)
    end
    if method ~= "PUT" and method ~= "POST" then
      ngx.header["Allow"] = "GET, PUT, POST"
      return reply(405, "GET, PUT or POST")
    end
    ngx.req.read_body()
    local text = ngx.req.get_body_data()
    if not text then
      return reply(400, "no map in the body")
    end
    local map, err = parse(text)
    if not map then
      return reply(422, "map refused: " .. err)
    end
    -- One update at a time across the worker processes (the lock ends by itself after 5 s).
    if not dict:add("update-lock", true, 5) then
      return reply(409, "another map update is in progress")
    end
    local outcome, status, reason = store(text, map)
    dict:delete("update-lock")
    if not outcome then
      return reply(status, reason)
    end
    ngx.header["X-Placement-Version"] = map.version
    return reply(200, "placement map version " .. map.version .. " " .. outcome)
  end

  return M
end)()
