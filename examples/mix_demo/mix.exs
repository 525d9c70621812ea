# A mix project that uses kprof from this checkout (doc/install.md).
# `make check-mix` builds and runs it: kprof's mix.exs builds it with mix
# alone (no rebar3).
defmodule MixDemo.MixProject do
  use Mix.Project

  def project do
    [
      app: :mix_demo,
      version: "0.1.0",
      elixir: "~> 1.14",
      start_permanent: Mix.env() == :prod,
      deps: deps()
    ]
  end

  def application do
    [extra_applications: [:logger]]
  end

  defp deps do
    [{:kprof, path: "../.."}]
  end
end
