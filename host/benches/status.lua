-- The default status rules written in Lua, line for line after
-- plugins/status/src/rules.rs, as a user would write them for a host that
-- runs Lua health checks (Argo CD's way). The benchmark runs them with mlua
-- beside the native and Wasm builds of the Rust rules; the tests check that
-- all three agree.
--
-- The input is the status policy's `app-input` as Lua tables (enums as their
-- WIT names); the answer is the `app-verdict` the same way.

local settings = {
  restart_window_ms = 5 * 60000,
  overload_ratio = 0.9,
  unready_grace_ms = 2 * 60000,
  pending_grace_ms = 10 * 60000,
}

local function condition(conditions, kind)
  for _, c in ipairs(conditions) do
    if c.kind == kind then return c end
  end
  return nil
end

-- Whether `since` lies further back than `span`; when not, the answer
-- changes at `since + span`, which becomes a recheck time.
local function older_than(ev, since, span)
  if ev.now - since >= span then return true end
  local at = since + span
  if ev.recheck == nil or at < ev.recheck then ev.recheck = at end
  return false
end

local function span(ms)
  local s = math.max(ms, 0) // 1000
  if s < 60 then return string.format("%d s", s)
  elseif s < 3600 then return string.format("%d min", s // 60)
  elseif s < 86400 then return string.format("%d h", s // 3600)
  else return string.format("%d d", s // 86400) end
end

-- ---- containers -----------------------------------------------------------

local function running_status(ev, c, started_at)
  local window = settings.restart_window_ms
  local last = c.last_state
  if last then
    local ended = last.finished_at or started_at or ev.now
    if not older_than(ev, ended, window) then
      local abnormal = last.exit_code ~= 0 or last.reason == "OOMKilled"
      local message = string.format("restarted %d times; last run ended with code %d%s",
        c.restart_count, last.exit_code, last.message and (": " .. last.message) or "")
      return abnormal and "running-unhealthy" or "running-restarting", last.reason or "Restarted", message
    end
  end
  if c.restart_count > 0 and started_at and not older_than(ev, started_at, window) then
    return "running-restarting", "Restarted", string.format("restarted %d times", c.restart_count)
  end
  if not c.ready then return "running-not-ready", "NotReady", nil end
  return "running-healthy", nil, nil
end

local function instance_verdict(ev, c)
  local state = c.state
  local status, reason, message
  if state.kind == "unknown" then
    status = "unknown"
  elseif state.kind == "waiting" then
    message = state.message
    if message == nil and c.last_state then
      local t = c.last_state
      message = string.format("last run ended with code %d%s", t.exit_code, t.reason and (" (" .. t.reason .. ")") or "")
    end
    if state.reason == "CrashLoopBackOff" then
      status, reason = "running-restarting", state.reason
    else
      status, reason = "pending", state.reason
    end
  elseif state.kind == "terminated" and state.exit_code == 0 then
    status, reason, message = "succeeded", state.reason or "Completed", state.message
  elseif state.kind == "terminated" then
    status, reason = "failed", state.reason or "Error"
    message = state.message or string.format("exited with code %d", state.exit_code)
  else
    status, reason, message = running_status(ev, c, state.started_at)
  end
  return {
    name = c.name, is_app_instance = c.kind == "main", status = status,
    reason = reason, message = message, restart_count = c.restart_count,
  }
end

-- ---- pods -------------------------------------------------------------------

local function node_unreachable(pod, nodes)
  for _, node in ipairs(nodes) do
    if node.name == pod.node then
      local unreachable = false
      for _, t in ipairs(node.taints) do
        if t.key == "node.kubernetes.io/unreachable" then unreachable = true end
      end
      if node.ready == "unknown" or unreachable then
        return "node " .. node.name .. " is not reachable"
      end
      return nil
    end
  end
  return nil
end

local function init_progress(pairs)
  local inits = {}
  for _, p in ipairs(pairs) do
    if p.c.kind == "init" then inits[#inits + 1] = p end
  end
  local done = 0
  while inits[done + 1] and inits[done + 1].i.status == "succeeded" do done = done + 1 end
  local blocking = inits[done + 1]
  if blocking == nil then return nil end
  local i, c = blocking.i, blocking.c
  local reason
  if i.status == "failed" and i.reason == "OOMKilled" then reason = "Init:OOMKilled"
  elseif i.status == "failed" then reason = "Init:Error"
  elseif i.status == "pending" and i.reason and i.reason ~= "PodInitializing" and i.reason ~= "ContainerCreating" then
    reason = "Init:" .. i.reason
  elseif c.last_state and c.last_state.exit_code ~= 0 then reason = "Init:Error"
  else reason = string.format("Init:%d/%d", done, #inits) end
  local message = i.message or ("init container " .. c.name .. " has not completed")
  return "pending", reason, message
end

local function pending(pod, mains)
  local scheduled = condition(pod.conditions, "PodScheduled")
  if scheduled and scheduled.status == "false" then
    return "pending", scheduled.reason or "Unschedulable", scheduled.message
  end
  for _, p in ipairs(mains) do
    if p.i.reason then return "pending", p.i.reason, p.i.message end
  end
  return "pending", "Pending", pod.message
end

local function overload(pod)
  for _, c in ipairs(pod.containers) do
    local usage = c.usage
    if usage then
      local u, l = usage.cpu_millis, c.limits.cpu_millis
      if u and l and l > 0 and u / l >= settings.overload_ratio then
        return string.format("container %s uses %dm of %dm CPU", c.name, u, l)
      end
      u, l = usage.memory_bytes, c.limits.memory_bytes
      if u and l and l > 0 and u / l >= settings.overload_ratio then
        return string.format("container %s uses %d MiB of %d MiB memory", c.name, u >> 20, l >> 20)
      end
    end
  end
  return nil
end

local function running(ev, pod, mains)
  local function with(status)
    for _, p in ipairs(mains) do
      if p.i.status == status then return p end
    end
    return nil
  end
  for _, p in ipairs(mains) do
    if p.i.reason == "CrashLoopBackOff" then
      return "running-restarting", "CrashLoopBackOff", p.i.message
    end
  end
  local failed = with("failed")
  if failed then
    local status = pod.restart_policy == "never" and "running-unhealthy" or "running-restarting"
    return status, failed.i.reason or "Error", failed.i.message or ("container " .. failed.c.name .. " exited")
  end
  local restarting = with("running-unhealthy") or with("running-restarting")
  if restarting then
    return "running-restarting", restarting.i.reason or "Restarted", restarting.i.message
  end
  local waiting = with("pending")
  if waiting then
    return "running-not-ready", waiting.i.reason or "ContainerCreating", waiting.i.message
  end
  local heavy = overload(pod)
  if heavy then return "running-overloaded", "Overloaded", heavy end

  local ready = condition(pod.conditions, "Ready")
  local unready, names = {}, {}
  for _, p in ipairs(mains) do
    if p.i.status == "running-not-ready" then
      unready[#unready + 1] = p
      names[#names + 1] = p.c.name
    end
  end
  local gate_closed = ready ~= nil and ready.status == "false"
  if #unready == 0 and not gate_closed then return "running-healthy", "Running", nil end
  local message
  if #unready == 0 then
    message = (ready and ready.message) or "readiness gates are not passing"
  else
    message = "containers not ready: " .. table.concat(names, ", ")
  end
  local restarted
  for _, p in ipairs(unready) do
    local started = p.c.state.kind == "running" and p.c.state.started_at or nil
    if started and (restarted == nil or started > restarted) then restarted = started end
  end
  local turned = (ready and ready.status ~= "true") and ready.last_transition or nil
  local since = turned
  if restarted and (since == nil or restarted > since) then since = restarted end
  since = since or pod.started_at
  local reason = "NotReady"
  for _, p in ipairs(unready) do
    local t = p.c.last_state
    if t and (t.exit_code ~= 0 or t.reason == "OOMKilled") then
      reason = t.reason or "NotReady"
      break
    end
  end
  if since and older_than(ev, since, settings.unready_grace_ms) then
    return "running-unhealthy", reason, message .. ", for " .. span(ev.now - since)
  end
  return "running-not-ready", reason, message
end

local function group_status(ev, pod, nodes, instances)
  local pairs_, mains = {}, {}
  for k, c in ipairs(pod.containers) do
    local p = { c = c, i = instances[k] }
    pairs_[#pairs_ + 1] = p
    if c.kind == "main" then mains[#mains + 1] = p end
  end
  if pod.deleting_since then
    return "terminating", "Terminating", "deletion requested " .. span(ev.now - pod.deleting_since) .. " ago"
  end
  local why = node_unreachable(pod, nodes)
  if why then return "unknown", "NodeUnreachable", why end
  if pod.phase == "unknown" or pod.reason == "NodeLost" then
    return "unknown", pod.reason or "Unknown", pod.message or "the pod's node stopped reporting on it"
  end
  if pod.phase == "failed" then
    local failed
    for _, p in ipairs(mains) do
      if p.i.status == "failed" then failed = p.i break end
    end
    if not failed then
      for _, p in ipairs(pairs_) do
        if p.i.status == "failed" then failed = p.i break end
      end
    end
    return "failed", pod.reason or (failed and failed.reason) or "Error", pod.message or (failed and failed.message)
  elseif pod.phase == "succeeded" then
    return "succeeded", "Completed", nil
  end
  local status, reason, message = init_progress(pairs_)
  if status then return status, reason, message end
  if pod.phase == "pending" then return pending(pod, mains) end
  return running(ev, pod, mains)
end

local function pod_verdict(ev, pod, nodes)
  local instances = {}
  for k, c in ipairs(pod.containers) do instances[k] = instance_verdict(ev, c) end
  local status, reason, message = group_status(ev, pod, nodes, instances)
  return {
    name = pod.name, node = pod.node, status = status, reason = reason,
    message = message, instances = instances,
  }
end

-- ---- applications -----------------------------------------------------------

local STUCK = {
  CrashLoopBackOff = true, ImagePullBackOff = true, ErrImagePull = true,
  CreateContainerConfigError = true, CreateContainerError = true, InvalidImageName = true,
  RunContainerError = true, OOMKilled = true, Error = true,
}

local function is_failing(ev, group, pod)
  local reason = group.reason
  while reason:sub(1, 5) == "Init:" do reason = reason:sub(6) end
  local s = group.status
  if s == "failed" or s == "running-unhealthy" or s == "running-restarting" then return true end
  if STUCK[reason] then return true end
  if s == "pending" then
    local scheduled = condition(pod.conditions, "PodScheduled")
    local since = (scheduled and scheduled.status == "false") and scheduled.last_transition or nil
    since = since or pod.created_at
    return since ~= nil and older_than(ev, since, settings.pending_grace_ms)
  end
  return false
end

local function stuck_rollout(app)
  for _, w in ipairs(app.workloads) do
    local c = condition(w.conditions, "Progressing")
    if c and c.reason == "ProgressDeadlineExceeded" then
      return w.kind .. " " .. w.name .. (c.message and (" (" .. c.message .. ")") or "")
    end
  end
  return nil
end

local function stable_status(ev, app, groups, expected, ready)
  if not app.namespace_exists then
    return "not-existed", "namespace " .. app.id.namespace .. " does not exist"
  end
  if #app.workloads == 0 and #app.pods == 0 then
    return "stopped", "no Deployment or StatefulSet exists"
  end
  if expected == 0 then return "stopped", "scaled to zero replicas" end
  local rollout = stuck_rollout(app)
  if ready < expected then
    local failing = {}
    for k, g in ipairs(groups) do
      if is_failing(ev, g, app.pods[k]) then failing[#failing + 1] = g end
    end
    local whole = ready == 0 or (#app.pods > 0 and #failing == #app.pods)
    if #failing > 0 then
      local named
      if #failing == 1 then
        named = string.format("pod %s is %s", failing[1].name, failing[1].reason)
      else
        local names = {}
        for i = 1, math.min(#failing, 3) do
          names[#names + 1] = string.format("%s (%s)", failing[i].name, failing[i].reason)
        end
        if #failing > 3 then names[#names + 1] = string.format("%d more", #failing - 3) end
        named = "pods " .. table.concat(names, ", ") .. " are failing"
      end
      return whole and "panic" or "degraded", string.format("%d/%d ready; %s", ready, expected, named)
    end
    if rollout then
      return ready == 0 and "panic" or "degraded",
        string.format("%d/%d ready; the rollout of %s is stuck", ready, expected, rollout)
    end
    return "degraded", string.format("%d/%d replicas ready", ready, expected)
  end
  if rollout then
    return "degraded", string.format("%d/%d ready, but the rollout of %s is stuck", ready, expected, rollout)
  end
  local probe = app.probe
  if probe then
    local detail = probe.message and (": " .. probe.message) or ""
    if probe.outcome == "failing" then
      return "degraded", "health check " .. probe.url .. " failing" .. detail
    elseif probe.outcome == "unreachable" then
      return "panic", "health check " .. probe.url .. " unreachable" .. detail
    end
  end
  return "running", string.format("%d/%d replicas ready", ready, expected)
end

local TRANSITIONS = {
  create = { "creating", "Creating" }, start = { "starting", "Starting" },
  stop = { "stopping", "Stopping" }, restart = { "restarting", "Restarting" },
  update = { "updating", "Updating" }, scale = { "scaling", "Scaling" },
  delete = { "deleting", "Deleting" },
}

local STABLE_WORDS = {
  running = { "Running", "ok" }, degraded = { "Degraded", "warning" },
  stopped = { "Stopped", "ok" }, panic = { "Panic", "error" },
  ["not-existed"] = { "Not existed", "ok" },
}

local function in_flight(phase)
  return phase == "pending" or phase == "awaiting-approval" or phase == "running"
end

local function last_change(app)
  local latest = math.mininteger
  local function see(t) if t and t > latest then latest = t end end
  for _, w in ipairs(app.workloads) do
    for _, c in ipairs(w.conditions) do see(c.last_transition) end
  end
  for _, p in ipairs(app.pods) do
    for _, c in ipairs(p.conditions) do see(c.last_transition) end
    see(p.created_at)
    see(p.deleting_since)
  end
  return latest
end

local function display_of(stable, stable_reason, transitional, failed_task)
  if transitional then
    local words = TRANSITIONS[transitional.action]
    local text, severity
    if transitional.phase == "awaiting-approval" then
      text, severity = words[2] .. " — awaiting approval", "warning"
    elseif transitional.phase == "pending" then
      text, severity = words[2] .. " — pending", "progressing"
    else
      text, severity = string.format("%s %d%%", words[2], transitional.progress), "progressing"
    end
    return { status = words[1], text = text, severity = severity, progress = transitional.progress }
  end
  local word, severity = STABLE_WORDS[stable][1], STABLE_WORDS[stable][2]
  if failed_task then
    return {
      status = stable,
      text = word .. " — " .. failed_task.action .. " failed" .. (failed_task.message and (": " .. failed_task.message) or ""),
      severity = "error",
    }
  end
  local text = word
  if stable == "degraded" or stable == "panic" then text = word .. " — " .. stable_reason end
  return { status = stable, text = text, severity = severity }
end

local function owned_by_workload(app, pod)
  if not pod.owner then return false end
  for _, w in ipairs(app.workloads) do
    if w.name == pod.owner.name then return true end
  end
  return false
end

local function pod_ready(pod)
  local c = condition(pod.conditions, "Ready")
  return pod.deleting_since == nil and c ~= nil and c.status == "true"
end

-- The verdict on one application.
function evaluate(now, input)
  local app = input.app
  local ev = { now = now, recheck = nil }
  local groups = {}
  for k, pod in ipairs(app.pods) do groups[k] = pod_verdict(ev, pod, input.nodes) end

  local bare, bare_ready = 0, 0
  for _, pod in ipairs(app.pods) do
    if not owned_by_workload(app, pod) then
      bare = bare + 1
      if pod_ready(pod) then bare_ready = bare_ready + 1 end
    end
  end
  local expected = app.expected_replicas
  if expected == nil then
    expected = bare
    for _, w in ipairs(app.workloads) do expected = expected + w.desired_replicas end
  end
  local ready = bare_ready
  for _, w in ipairs(app.workloads) do ready = ready + w.ready_replicas end

  local stable, stable_reason = stable_status(ev, app, groups, expected, ready)
  local transitional
  for _, t in ipairs(input.tasks) do
    if in_flight(t.phase) then
      transitional = {
        status = TRANSITIONS[t.action][1], action = t.action, task_id = t.id,
        phase = t.phase, progress = math.min(t.progress, 100),
      }
      break
    end
  end
  local failed_task = input.tasks[1]
  if not (failed_task and failed_task.phase == "failed" and last_change(app) <= failed_task.updated_at) then
    failed_task = nil
  end
  return {
    stable = stable, stable_reason = stable_reason, transitional = transitional,
    display = display_of(stable, stable_reason, transitional, failed_task),
    ready_replicas = ready, expected_replicas = expected, groups = groups,
    recheck_after = ev.recheck,
  }
end
