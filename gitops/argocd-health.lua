-- Argo CD health check for kvant.dev/QuantizedModel (resource.customizations.health.kvant.dev_QuantizedModel).
-- Reads only status: observedGeneration, then the Degraded, Ready and Progressing conditions of the
-- current generation, in that order. The operator never writes spec, so this is the whole story.
local hs = {}

local generation = obj.metadata and obj.metadata.generation
local status = obj.status
if status == nil or status.observedGeneration == nil then
  hs.status = "Progressing"
  hs.message = "waiting for the Kvant operator to observe this QuantizedModel"
  return hs
end
if generation ~= nil and status.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = "waiting for the Kvant operator to observe generation " .. generation
    .. " (status is for generation " .. status.observedGeneration .. ")"
  return hs
end

-- A condition written for an older generation says nothing about the current spec.
local conditions = {}
for _, condition in ipairs(status.conditions or {}) do
  if generation == nil or condition.observedGeneration == nil or condition.observedGeneration >= generation then
    conditions[condition.type] = condition
  end
end

local function is_true(type_)
  return conditions[type_] ~= nil and conditions[type_].status == "True"
end

local function message(type_)
  return conditions[type_].message or conditions[type_].reason or type_
end

if is_true("Degraded") then
  hs.status = "Degraded"
  hs.message = message("Degraded")
elseif is_true("Ready") then
  hs.status = "Healthy"
  hs.message = message("Ready")
elseif is_true("Progressing") then
  hs.status = "Progressing"
  hs.message = message("Progressing")
else
  hs.status = "Unknown"
  hs.message = "no Ready, Progressing or Degraded condition is True for generation " .. tostring(generation)
    .. " (phase " .. tostring(status.phase) .. ")"
end
return hs
