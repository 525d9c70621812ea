defmodule MixDemoTest do
  use ExUnit.Case

  test "a flame graph of an Elixir call, with its top functions" do
    dir = Path.join(System.tmp_dir!(), "kprof-mix-demo-#{System.unique_integer([:positive])}")
    {result, files, top} = MixDemo.run(dir)
    assert result == MixDemo.work(10_000)
    assert [folded, svg] = files
    assert is_binary(folded) and String.ends_with?(folded, ".folded")
    assert String.ends_with?(svg, ".svg") and File.regular?(svg)
    # The folded stacks name Elixir's modules as the VM does.
    assert File.read!(folded) =~ "Elixir.MixDemo:work/1"
    assert length(top) == 5
    assert Enum.any?(top, fn %{mfa: {m, _, _}} -> m == Enum end)
    File.rm_rf!(dir)
  end

  test "names: :elixir names the frames and the table's functions as Elixir does" do
    dir = Path.join(System.tmp_dir!(), "kprof-mix-demo-#{System.unique_integer([:positive])}")

    printed =
      ExUnit.CaptureIO.capture_io(fn ->
        # Every function in the table (top: 20): square/1's own work is a
        # multiplication, and with tracing's cost taken off it may rank
        # below the five the demo prints by default.
        send(self(), {:ran, MixDemo.run(dir, names: :elixir, top: 20)})
      end)

    assert_received {:ran, {_, [folded, _svg], _top}}
    assert File.read!(folded) =~ "MixDemo.work/1"
    refute File.read!(folded) =~ "Elixir.MixDemo"
    assert printed =~ "MixDemo.square/1"
    File.rm_rf!(dir)
  end

  test "a routine capture logs nothing, at any level (IEx shows debug by default)" do
    dir = Path.join(System.tmp_dir!(), "kprof-mix-demo-#{System.unique_integer([:positive])}")
    Logger.configure(level: :debug)

    log =
      ExUnit.CaptureLog.capture_log([level: :debug], fn ->
        ExUnit.CaptureIO.capture_io(fn -> send(self(), {:ran, MixDemo.run(dir)}) end)
      end)

    assert_received {:ran, {_, [_folded, _svg], _top}}
    assert log == ""
    # The counts a log line used to carry are there to read.
    assert %{files: [_, _], info: %{events: events}} = :kprof_flame.last_written()
    assert events > 0
    File.rm_rf!(dir)
  end

  test "keyword options: a bad one is refused, naming it" do
    assert {:error, {:bad_option, :sleep, :yes}} = :kprof.flame_apply(fn -> :ok end, sleep: :yes)
  end
end
