%%% @doc Who may ask for a flame graph of an HTTP request, how often, and
%%% what is left on disk: the gate of {@link kprof_flame_web},
%%% {@link kprof_flame_httpd} and `kprof_flame_mochiweb:loop/2'.
%%%
%%% The application environment `allow_tracing' says:
%%% <ul>
%%% <li>`false' (the default): no request is traced;</li>
%%% <li>`true': requests from loopback clients (127.0.0.0/8, ::1) that send
%%%     `x-trace-request: true', with the defaults below;</li>
%%% <li>a map (or a keyword list), every key optional:
%%%   <ul>
%%%   <li>`secret => Binary' (at least 16 bytes): only a request whose
%%%       `x-trace-request' is this value is traced (compared in constant
%%%       time);</li>
%%%   <li>`from => [CIDR]' (`"10.0.0.0/8"', `"::1"', `{{10,0,0,0}, 8}'),
%%%       `loopback' (the default) or `any' (only with a secret): the
%%%       client addresses that may ask;</li>
%%%   <li>`rate => {N, PerMs}' (default `{10, 60000}'): a token bucket of
%%%       N captures refilled over PerMs ms; `infinity' for none;</li>
%%%   <li>`max_seconds' (default 10): a capture's tracing stops after this
%%%       long (the guard's limit; the files hold what came before);</li>
%%%   <li>`max_bytes' (default 100 MiB): the kprof files of the output
%%%       directory in all; after each capture the oldest go until the rest
%%%       fit (the capture's own are kept);</li>
%%%   <li>`keep_patterns_ms' (default 1000): how long the call patterns
%%%       every capture needs stay set after the last capture ends, so that a
%%%       capture starting meanwhile does not set them again (bench/RESULTS.md,
%%%       "Web capture cost"); 0 sets and clears them for every capture.</li>
%%%   </ul></li>
%%% </ul>
%%% With the default `from' (loopback) and no secret, a request carrying a
%%% proxy's `x-forwarded-for', `x-real-ip' or `forwarded' header is refused:
%%% behind a reverse proxy on the same host every client comes from
%%% loopback. Give a `secret' there (and have the proxy drop
%%% `x-trace-request' from the requests it forwards): the secret is then
%%% the gate. A proxy that adds none of these headers cannot be told from a
%%% local client: doc/security.md.
%%%
%%% A refused request runs as usual and is counted by reason ({@link
%%% status/0}, in `kprof:status()'): `off', `bad_config', `address',
%%% `forwarded', `secret', `rate', `output_directory' (the default directory
%%% cannot be made or is unsafe), `busy' (flame_apply refused: tiers running,
%%% every capture slot of the sink taken, another tracer). The first refusal
%%% of each reason is logged once with what to do; later ones only counted.
%%% A client the address check admitted is told why in an `x-kprof-refused'
%%% response header; any other client learns nothing.
%%%
%%% The files go to `output_directory' when the options give one, else to
%%% {@link default_dir/0}; either way the sink makes it 0700 and refuses a
%%% symlink, a directory of another user, or one others can write to; the
%%% files are 0600 (doc/security.md).
-module(kprof_web_gate).

-include_lib("kernel/include/file.hrl").

-export([config/0, decide/3, refused/2, traced/0, status/0, keep_patterns_ms/0,
         default_dir/0, prune/3, with_meta/1, is_loopback/1]).

-export_type([config/0, reason/0, peer/0]).

-type reason() :: off | bad_config | address | forwarded | secret | rate
                | output_directory | busy.
-type cidr() :: {inet:ip_address(), 0..128}.
-type config() :: off
                | #{secret := binary() | undefined, from := [cidr()] | any,
                    loopback_only := boolean(),
                    rate := {pos_integer(), pos_integer()} | infinity,
                    max_seconds := pos_integer() | infinity,
                    max_bytes := pos_integer() | infinity,
                    keep_patterns_ms := non_neg_integer()}.
%% The client's address (undefined: unknown) and whether the request has
%% a proxy's forwarding header.
-type peer() :: {inet:ip_address() | undefined, Forwarded :: boolean()}.

-define(META, ".meta.json").
-define(REASONS, [off, bad_config, address, forwarded, secret, rate, output_directory, busy]).
%% What the gate counts, one atomics slot each, numbered by their place here:
%% every refusal reason, then the traced requests and the files pruned.
-define(COUNTED, ?REASONS ++ [traced, deleted_files]).
-define(LOOPBACK, [{{127, 0, 0, 0}, 8}, {{0, 0, 0, 0, 0, 0, 0, 1}, 128}]).
-define(DEFAULTS, #{secret => undefined, from => ?LOOPBACK, loopback_only => true,
                    rate => {10, 60000}, max_seconds => 10, max_bytes => 100 bsl 20,
                    keep_patterns_ms => 1000}).
-define(KEYS, [secret, from, rate, max_seconds, max_bytes, keep_patterns_ms]).
-define(MIN_SECRET, 16).
-define(MAX_KEEP_MS, 60000).

%%%%%%%%%%%%%%
%%% PUBLIC %%%
%%%%%%%%%%%%%%

%% @doc `allow_tracing' checked: `{ok, off}', `{ok, Config}' with every
%% default filled in, or `{error, Why}' naming the bad key or value.
-spec config() -> {ok, config()} | {error, term()}.
config() ->
    Raw = application:get_env(kprof, allow_tracing, false),
    %% Parsed once per value: every traced request reads it.
    case persistent_term:get({?MODULE, config}, undefined) of
        {Raw, Parsed} ->
            Parsed;
        _ ->
            Parsed = parse(Raw),
            persistent_term:put({?MODULE, config}, {Raw, Parsed}),
            Parsed
    end.

%% @doc What to do with a request whose `x-trace-request' header has this
%% value (`undefined' when absent), from this client, under this
%% configuration ({@link config/0}'s answer): `trace', `none' (it did not
%% ask), or `{refused, Reason, Tell}' (counted; `Tell': whether the client
%% may be told why, i.e. its address is one that may ask).
-spec decide(undefined | string() | binary(), peer(), {ok, config()} | {error, term()}) ->
          trace | none | {refused, reason(), boolean()}.
decide(undefined, _Peer, _Config) ->
    none;
decide(Value, Peer, Config) when is_list(Value) ->
    decide(unicode:characters_to_binary(Value), Peer, Config);
decide(Value0, {IP, Forwarded}, Config) ->
    Value = string:trim(Value0),
    Asked = not lists:member(string:lowercase(Value), [<<>>, <<"false">>, <<"0">>]),
    case {Asked, Config} of
        {false, _} ->
            none;
        {true, {error, _}} ->
            %% Said to a loopback client, as `off' is: the operator asking.
            refuse(bad_config, is_loopback(IP));
        {true, {ok, off}} ->
            refuse(off, is_loopback(IP));
        {true, {ok, #{from := From, loopback_only := LoopbackOnly, secret := S} = C}} ->
            case allowed(IP, From) of
                false ->
                    refuse(address, false);
                true when Forwarded, LoopbackOnly, S =:= undefined ->
                    refuse(forwarded, true);
                true ->
                    case secret_ok(Value, maps:get(secret, C)) of
                        false -> refuse(secret, true);
                        true -> take(maps:get(rate, C))
                    end
            end
    end.

%% @doc Counts a refusal (the first of each reason is logged, once); `Tell'
%% comes back as `{refused, Reason, Tell}'.
-spec refused(reason(), boolean()) -> {refused, reason(), boolean()}.
refused(Reason, Tell) ->
    refuse(Reason, Tell).

%% @doc Counts a traced request.
-spec traced() -> ok.
traced() ->
    _ = atomics:add_get(counts(), slot(traced), 1),
    ok.

%% @doc What the gate allows and what it refused since the node started:
%% `#{allow_tracing => off | {bad_config, Why} | Summary, refused => #{Reason
%% => N}, traced => N, deleted_files => N, output_directory => Dir}' (the
%% secret itself is never shown: `secret => set').
-spec status() -> map().
status() ->
    C = counts(),
    Allow = case config() of
                {ok, off} -> off;
                {ok, Cfg} -> summary(Cfg);
                {error, Why} -> {bad_config, Why}
            end,
    Dir = try default_dir() catch _:_ -> undefined end,
    #{allow_tracing => Allow,
      refused => maps:from_list([{R, atomics:get(C, slot(R))} || R <- ?REASONS]),
      traced => atomics:get(C, slot(traced)),
      deleted_files => atomics:get(C, slot(deleted_files)),
      output_directory => Dir}.

%% @doc How long kprof_flame_srv keeps the call patterns after the last
%% capture ends: `keep_patterns_ms' while web captures are allowed, else 0.
-spec keep_patterns_ms() -> non_neg_integer().
keep_patterns_ms() ->
    case config() of
        {ok, #{keep_patterns_ms := Ms}} -> Ms;
        _ -> 0
    end.

%% @doc Where a web capture writes when its options name no
%% `output_directory': `http' in kprof's user cache directory
%% (`$XDG_CACHE_HOME/kprof/http', else `~/.cache/kprof/http'), which the
%% sink makes with mode 0700. Raises when the VM has no `HOME' (give an
%% `output_directory' then).
-spec default_dir() -> file:filename().
default_dir() ->
    filename:join(filename:basedir(user_cache, "kprof"), "http").

%% @doc Removes the oldest kprof files of `Dir' (regular files named
%% `kprof-*' with a flame format's extension) until the rest hold at most
%% `MaxBytes', never one of `Keep' (base names of the capture just written).
%% Returns how many went (counted in {@link status/0}).
-spec prune(file:filename_all(), pos_integer() | infinity, [file:filename_all()]) ->
          non_neg_integer().
prune(_Dir, infinity, _Keep) ->
    0;
prune(Dir, MaxBytes, Keep) ->
    Files = kprof_files(Dir),
    Total = lists:sum([Size || {_, Size, _} <- Files]),
    KeepSet = [unicode:characters_to_list(K) || K <- Keep],
    Oldest = lists:sort([{MTime, Name, Size} || {Name, Size, MTime} <- Files,
                                               not lists:member(Name, KeepSet)]),
    N = remove(Dir, Oldest, Total, MaxBytes, 0),
    _ = N > 0 andalso atomics:add_get(counts(), slot(deleted_files), N),
    N.

%% @doc Whether an address is a loopback one (IPv4-mapped IPv6 included).
-spec is_loopback(inet:ip_address() | undefined) -> boolean().
is_loopback(IP) ->
    allowed(IP, ?LOOPBACK).

%%%%%%%%%%%%%%%
%%% PRIVATE %%%
%%%%%%%%%%%%%%%

-spec parse(term()) -> {ok, config()} | {error, term()}.
parse(false) ->
    {ok, off};
parse(true) ->
    {ok, ?DEFAULTS};
parse(KV) when is_list(KV) ->
    case lists:all(fun({K, _}) -> is_atom(K); (_) -> false end, KV) of
        %% A keyword list (Elixir's config): the first of a key wins.
        true -> parse(maps:from_list(lists:reverse(KV)));
        false -> {error, {bad_value, KV}}
    end;
parse(M) when is_map(M) ->
    case [K || K <- maps:keys(M), not lists:member(K, ?KEYS)] of
        [] -> fields(maps:to_list(M), ?DEFAULTS);
        Unknown -> {error, {unknown_keys, lists:sort(Unknown)}}
    end;
parse(Other) ->
    {error, {bad_value, Other}}.

-spec fields([{atom(), term()}], map()) -> {ok, config()} | {error, term()}.
fields([], #{from := any, secret := undefined}) ->
    {error, {from, any, "needs a secret"}};
fields([], C) ->
    {ok, C};
fields([{K, V} | Rest], C) ->
    case field(K, V) of
        {ok, C1} -> fields(Rest, maps:merge(C, C1));
        error -> {error, {bad_option, K, shown(K, V)}}
    end.

-spec field(atom(), term()) -> {ok, map()} | error.
field(secret, S) when is_binary(S); is_list(S) ->
    try iolist_to_binary(S) of
        B when byte_size(B) >= ?MIN_SECRET -> {ok, #{secret => B}};
        _ -> error
    catch
        error:badarg -> error
    end;
field(from, loopback) ->
    {ok, #{from => ?LOOPBACK, loopback_only => true}};
field(from, any) ->
    {ok, #{from => any, loopback_only => false}};
field(from, L) when is_list(L), L =/= [] ->
    Parsed = [cidr(X) || X <- L],
    case lists:member(error, Parsed) of
        true -> error;
        false -> {ok, #{from => Parsed, loopback_only => false}}
    end;
field(rate, infinity) ->
    {ok, #{rate => infinity}};
field(rate, {N, Ms}) when is_integer(N), N > 0, is_integer(Ms), Ms > 0 ->
    {ok, #{rate => {N, Ms}}};
field(max_seconds, S) when S =:= infinity; is_integer(S), S > 0 ->
    {ok, #{max_seconds => S}};
field(max_bytes, B) when B =:= infinity; is_integer(B), B > 0 ->
    {ok, #{max_bytes => B}};
field(keep_patterns_ms, Ms) when is_integer(Ms), Ms >= 0, Ms =< ?MAX_KEEP_MS ->
    {ok, #{keep_patterns_ms => Ms}};
field(_, _) ->
    error.

%% A bad secret is not echoed into errors and logs.
shown(secret, _) -> '<hidden>';
shown(_, V) -> V.

-spec cidr(term()) -> cidr() | error.
cidr({IP, Bits}) when is_tuple(IP), is_integer(Bits) ->
    case {tuple_size(IP), Bits} of
        {4, B} when B >= 0, B =< 32 -> {IP, B};
        {8, B} when B >= 0, B =< 128 -> {IP, B};
        _ -> error
    end;
cidr(B) when is_binary(B) ->
    cidr(binary_to_list(B));
cidr(S) when is_list(S) ->
    {Addr, Bits} = case string:split(S, "/") of
                       [A] -> {A, default};
                       [A, Bs] -> {A, try list_to_integer(Bs) catch error:badarg -> error end}
                   end,
    case inet:parse_strict_address(Addr) of
        {ok, IP} when Bits =:= default -> {IP, full_bits(IP)};
        {ok, IP} when is_integer(Bits) -> cidr({IP, Bits});
        _ -> error
    end;
cidr(_) ->
    error.

full_bits(IP) when tuple_size(IP) =:= 4 -> 32;
full_bits(_IP) -> 128.

-spec allowed(inet:ip_address() | undefined, [cidr()] | any) -> boolean().
allowed(_IP, any) ->
    true;
allowed(undefined, _From) ->
    false;
allowed(IP0, From) ->
    IP = unmapped(IP0),
    lists:any(fun({Net, Bits}) -> in_net(IP, unmapped(Net), Bits) end, From).

%% ::ffff:a.b.c.d is a.b.c.d (a dual-stack listener's IPv4 clients).
unmapped({0, 0, 0, 0, 0, 16#ffff, AB, CD}) -> {AB bsr 8, AB band 255, CD bsr 8, CD band 255};
unmapped(IP) -> IP.

in_net(IP, Net, Bits) when tuple_size(IP) =:= tuple_size(Net) ->
    Width = case tuple_size(IP) of 4 -> 8; 8 -> 16 end,
    <<A:Bits/bits, _/bits>> = << <<X:Width>> || X <- tuple_to_list(IP) >>,
    <<B:Bits/bits, _/bits>> = << <<X:Width>> || X <- tuple_to_list(Net) >>,
    A =:= B;
in_net(_, _, _) ->
    false.

%% Constant time in the value sent: both sides hashed to 16 bytes first, the
%% digests compared byte by byte without an early exit.
-spec secret_ok(binary(), binary() | undefined) -> boolean().
secret_ok(Value, undefined) ->
    string:lowercase(Value) =:= <<"true">>;
secret_ok(Value, Secret) ->
    A = erlang:md5(Value),
    B = erlang:md5(Secret),
    0 =:= lists:foldl(fun({X, Y}, Acc) -> Acc bor (X bxor Y) end, 0,
                      lists:zip(binary_to_list(A), binary_to_list(B))).

%% The rate's token bucket, as a generic cell rate algorithm on one atomic:
%% the theoretical arrival time of the next capture (µs since the bucket was
%% made). N captures at once, then one every PerMs / N ms.
-spec take({pos_integer(), pos_integer()} | infinity) -> trace | {refused, rate, true}.
take(infinity) ->
    trace;
take(Rate = {N, PerMs}) ->
    {Ref, Base} = bucket(Rate),
    T = max(1, PerMs * 1000 div N),
    Tau = PerMs * 1000 - T,
    take(Ref, erlang:monotonic_time(microsecond) - Base, T, Tau).

take(Ref, Now, T, Tau) ->
    Tat = atomics:get(Ref, 1),
    case Tat =< Now + Tau of
        false ->
            refuse(rate, true);
        true ->
            case atomics:compare_exchange(Ref, 1, Tat, max(Tat, Now) + T) of
                ok -> trace;
                _ -> take(Ref, Now, T, Tau)
            end
    end.

%% One bucket per rate: a new rate starts full.
bucket(Rate) ->
    case persistent_term:get({?MODULE, bucket}, undefined) of
        {Rate, Ref, Base} ->
            {Ref, Base};
        _ ->
            Ref = atomics:new(1, [{signed, true}]),
            Base = erlang:monotonic_time(microsecond),
            persistent_term:put({?MODULE, bucket}, {Rate, Ref, Base}),
            {Ref, Base}
    end.

-spec refuse(reason(), boolean()) -> {refused, reason(), boolean()}.
refuse(Reason, Tell) ->
    case atomics:add_get(counts(), slot(Reason), 1) of
        1 -> log_first(Reason);
        _ -> ok
    end,
    {refused, Reason, Tell}.

log_first(Reason) ->
    logger:notice("kprof web trigger: a request asking for a flame graph was refused (~s): ~ts. "
                  "Later refusals are counted, not logged: kprof:status()",
                  [Reason, hint(Reason)]).

hint(off) ->
    "tracing is off; application:set_env(kprof, allow_tracing, true) lets loopback clients "
    "ask (doc/security.md)";
hint(bad_config) ->
    case config() of
        {error, Why} -> io_lib:format("allow_tracing is not valid: ~0tp", [Why]);
        _ -> "allow_tracing was not valid"
    end;
hint(address) ->
    "the client's address is not in allow_tracing's `from' (loopback by default)";
hint(forwarded) ->
    "the request came through a proxy (x-forwarded-for, x-real-ip or forwarded): with the "
    "default `from' (loopback) a proxy on this host would let anyone ask; give a secret";
hint(secret) ->
    "the x-trace-request header is not the configured secret (or not `true' without one)";
hint(rate) ->
    "allow_tracing's rate is used up";
hint(output_directory) ->
    "the output directory could not be made or is not safe (not ours, a symlink, or "
    "writable by others); give `output_directory' in the capture's options";
hint(busy) ->
    "flame_apply refused to start (tier profiling running, every capture slot of the sink "
    "taken, or another tracer on the process)".

-spec counts() -> atomics:atomics_ref().
counts() ->
    case persistent_term:get({?MODULE, counts}, undefined) of
        undefined ->
            %% Two first counts at once may each make one: a count is lost.
            C = atomics:new(length(?COUNTED), []),
            persistent_term:put({?MODULE, counts}, C),
            C;
        C ->
            C
    end.

%% A count's slot: its place in ?COUNTED.
slot(Counted) ->
    slot(Counted, ?COUNTED, 1).

slot(R, [R | _], N) -> N;
slot(R, [_ | Rest], N) -> slot(R, Rest, N + 1).

summary(C = #{secret := S, from := From}) ->
    (maps:without([loopback_only], C))#{
      secret => case S of undefined -> none; _ -> set end,
      from => case From of
                  any -> any;
                  _ -> [cidr_text(X) || X <- From]
              end}.

cidr_text({IP, Bits}) ->
    lists:flatten(io_lib:format("~s/~b", [inet:ntoa(IP), Bits])).

%% kprof's files in Dir: [{Name, Size, MTime}], regular files only.
kprof_files(Dir0) ->
    Dir = unicode:characters_to_list(Dir0),
    case file:list_dir(Dir) of
        {ok, Names} ->
            [{N, Size, MTime}
             || N <- Names, is_list(N), is_kprof_file(N),
                {ok, #file_info{type = regular, size = Size, mtime = MTime}}
                    <- [file:read_link_info(filename:join(Dir, N), [{time, posix}])]];
        {error, _} ->
            []
    end.

%% The files prune/3 may remove: kprof's own names (kprof-...) in one of its
%% formats (the option table's, kprof_opts:formats/0), and the Base.meta.json
%% a folded file is written with.
is_kprof_file(N) ->
    lists:suffix(?META, N) andalso lists:prefix("kprof-", N)
        orelse lists:any(fun(F) ->
                                 case kprof_opts:base_name(F, N) of
                                     {ok, "kprof-" ++ _} -> true;
                                     _ -> false
                                 end
                         end, kprof_opts:formats()).

%% @doc The files a capture's `Files' came with: each folded file's
%% Base.meta.json (its correction and identity, port/write/meta.c), when
%% written, after `Files'.
-spec with_meta([file:filename_all()]) -> [file:filename_all()].
with_meta(Files) ->
    Metas = [Meta || F <- Files, Base <- folded_base(F),
                     Meta <- [Base ++ ?META], filelib:is_regular(Meta)],
    Files ++ lists:usort(Metas) -- Files.

folded_base(F) ->
    Name = unicode:characters_to_list(F),
    [string:slice(Name, 0, length(Name) - length(Ext))
     || Ext <- [".calls.folded", ".folded"], lists:suffix(Ext, Name)] -- [[]].

remove(_Dir, _Files, Total, Max, N) when Total =< Max ->
    N;
remove(_Dir, [], _Total, _Max, N) ->
    N;
remove(Dir, [{_, Name, Size} | Rest], Total, Max, N) ->
    case file:delete(filename:join(unicode:characters_to_list(Dir), Name)) of
        ok -> remove(Dir, Rest, Total - Size, Max, N + 1);
        {error, _} -> remove(Dir, Rest, Total, Max, N)
    end.
