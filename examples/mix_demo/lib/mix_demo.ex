defmodule MixDemo do
  @moduledoc """
  kprof from Elixir: a flame graph of one call, options as a keyword list,
  the files under a directory given as a string (a binary), and the table
  of the functions with the most self time.
  """

  @doc "Sums the squares of 1..n through a few functions (the work to profile)."
  def work(n), do: 1..n |> Enum.map(&square/1) |> Enum.sum()

  defp square(x), do: x * x

  @doc """
  Runs `work/1` under `:kprof.flame_apply/2` (more options in `opts`, e.g.
  `names: :elixir`) and returns `{result, files, top}`: the files are
  binaries, as the directory was.
  """
  def run(dir, opts \\ []) do
    :ok = :kprof.start()

    {:ok, result, files, top} =
      :kprof.flame_apply(
        fn -> work(10_000) end,
        # The caller's options first: of a repeated key, the first wins.
        opts ++ [output_directory: dir, output_format: [:folded, :svg], top: 5, progress: false]
      )

    {result, files, top}
  end
end
