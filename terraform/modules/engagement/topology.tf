# Every resource name comes from shared/topology/topology.json and every
# Spanner statement from shared/topology/ddl/*.sql: the same files the Go code
# (package shared/topology) and the local stack read. Nothing is named twice.
locals {
  topology_dir = "${path.module}/../../../shared/topology"
  topology     = jsondecode(file("${local.topology_dir}/topology.json"))

  # Spanner DDL exactly as topology.DDL builds it: files in name order, lines
  # starting with "--" dropped, split on ";", blank statements dropped.
  ddl_dir   = "${local.topology_dir}/${local.topology.spanner.ddlDir}"
  ddl_files = sort(tolist(fileset(local.ddl_dir, "*.sql")))
  ddl = flatten([
    for f in local.ddl_files : [
      for stmt in split(";", join("\n", [
        for line in split("\n", file("${local.ddl_dir}/${f}")) : line
        if !startswith(trimspace(line), "--")
      ])) : trimspace(stmt)
      if trimspace(stmt) != ""
    ]
  ])

  # Functions by their entry point name (History, ApplyCounters, ...). The
  # deployed name is the kebab-case form (apply-counters).
  functions = {
    for f in local.topology.functions : f.name => {
      name   = f.name
      id     = lower(replace(f.name, "/([a-z0-9])([A-Z])/", "$1-$2"))
      kind   = f.kind
      public = try(f.public, false)
      routes = try(f.routes, [])
      # Routes whose answer is the same for every caller, served through
      # Cloud CDN (api.tf).
      cdn_routes = try(f.cdnRoutes, [])
    }
  }
  public_functions    = { for k, f in local.functions : k => f if f.kind == "http" && f.public }
  scheduled_functions = { for k, f in local.functions : k => f if f.kind == "scheduled" }
  event_functions     = { for k, f in local.functions : k => f if f.kind == "event" }

  labels = merge(var.labels, {
    app         = "engagement"
    environment = var.environment
  })
}
