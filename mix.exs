# kprof as a mix project, so that a mix project takes it as a git or path
# dependency with mix alone (no rebar3, no MIX_REBAR3):
#
#   {:kprof, git: "https://your.git.host/kprof.git", branch: "main"}
#   {:kprof, path: "../kprof"}
#
# Three compilers around mix's own: kprof.c runs scripts/preflight.sh (each
# missing compiler, header or library named with its package) and `make
# prebuild` (the C sink and the tracer NIF into erlang/priv, which `priv` links
# to, and the options header); mix's erlang compiler compiles erlang/src; kprof.docs writes the
# modules' docs as EEP-48 chunks into the application's doc/chunks, where
# Code.fetch_docs(:kprof) and IEx's h :kprof.flame_apply find them.
#
# The application's description, version, environment, ... and the hex
# package's licenses, links and files are those of erlang/src/kprof.app.src,
# which rebar3 and the Makefile read too.
defmodule Kprof.MixProject do
  use Mix.Project

  @app_src Path.join(__DIR__, "erlang/src/kprof.app.src")
  @external_resource @app_src
  {:ok, [{:application, :kprof, app}]} = :file.consult(@app_src)
  @app app

  def project do
    [
      app: :kprof,
      version: to_string(@app[:vsn]),
      description: to_string(@app[:description]),
      language: :erlang,
      erlc_paths: ["erlang/src"],
      erlc_include_path: "erlang/include",
      erlc_options: [:debug_info],
      # Mix (Elixir 1.15 and later) keeps in the code path only the
      # applications a project lists: inets, whose httpd.hrl two modules
      # include (kprof_flame_httpd, kprof_tiers_httpd, which the user's httpd
      # loads), would be gone, and kprof would not compile (Elixir 1.20, OTP
      # 29). kprof starts no application but its own.
      prune_code_paths: false,
      compilers: [:kprof_c] ++ Mix.compilers() ++ [:kprof_docs],
      deps: [],
      package: [
        licenses: Enum.map(@app[:licenses], &to_string/1),
        links: Map.new(@app[:links], fn {k, v} -> {to_string(k), to_string(v)} end),
        files: Enum.map(@app[:files], &to_string/1)
      ]
    ]
  end

  def application do
    Keyword.take(@app, [:mod, :registered, :applications, :env])
  end
end

defmodule Mix.Tasks.Compile.KprofC do
  @moduledoc false
  # The sink and the tracer NIF, by kprof's Makefile (incremental: make
  # rebuilds only what changed), after the preflight.
  use Mix.Task.Compiler

  @dir __DIR__

  @impl true
  def run(_args) do
    make = System.get_env("MAKE") || "make"

    before = built()

    # The preflight names a missing make too, before make is looked for.
    with :ok <- sh("sh", ["scripts/preflight.sh"]),
         :ok <- sh(make, ["--no-print-directory", "-j#{System.schedulers_online()}", "prebuild"]) do
      # mix linked priv into the application before make had made
      # erlang/priv (where `priv' points): again, now that it exists.
      Mix.Project.build_structure(Mix.Project.config(), source: @dir)
      if built() == before, do: {:noop, []}, else: {:ok, []}
    end
  end

  # The files make builds, with their times: unchanged, nothing was built.
  defp built do
    for f <- ["erlang/priv/kprof_sink", "erlang/priv/kprof_tracer.so", "erlang/include/kprof_options.hrl"],
        do: {f, File.stat(Path.join(@dir, f), time: :posix)}
  end

  defp sh(cmd, args) do
    case System.cmd(cmd, args, cd: @dir, into: IO.stream(:stdio, :line), stderr_to_stdout: true) do
      {_, 0} -> :ok
      {_, _} -> Mix.raise("kprof: `#{Enum.join([cmd | args], " ")}` failed in #{@dir} (why: above)")
    end
  end
end

defmodule Mix.Tasks.Compile.KprofDocs do
  @moduledoc false
  # The modules' docs as EEP-48 chunks beside the ebin mix wrote
  # (scripts/doc_chunks.escript, as rebar3's post-compile hook and the
  # Makefile do), when a source is newer than the chunks.
  use Mix.Task.Compiler

  @dir __DIR__

  @impl true
  def run(_args) do
    app_dir = Mix.Project.app_path()
    chunk = Path.join(app_dir, "doc/chunks/kprof.chunk")
    sources = Path.wildcard(Path.join(@dir, "erlang/src/*.erl"))

    if Mix.Utils.stale?(sources, [chunk]) do
      rel = Enum.map(sources, &Path.relative_to(&1, @dir))
      args = [Path.join(@dir, "scripts/doc_chunks.escript"), app_dir | rel]

      case System.cmd("escript", args, cd: @dir, stderr_to_stdout: true) do
        {_, 0} -> {:ok, []}
        {out, _} -> Mix.raise("kprof: the docs' chunks (scripts/doc_chunks.escript) failed:\n" <> out)
      end
    else
      {:noop, []}
    end
  end
end
