%% Functions whose names each output format must carry as they are
%% (kprof_flame_tests, unicode_names): one outside Latin-1 ('λ', which the
%% tracer NIF reads as UTF-8), one in Latin-1 past ASCII ('é') and one with
%% the characters the formats escape (<, &, ", ; and a space).
-module(kprof_unicode_work).
-export(['λ'/1, 'é'/1, 'a<b&"c;d e'/1]).

%% 'é'/1 once per element of 1..N, each calling 'a<b&"c;d e'/1.
-spec 'λ'(non_neg_integer()) -> non_neg_integer().
'λ'(N) ->
    lists:foldl(fun(I, Acc) -> Acc + ?MODULE:'é'(I) end, 0, lists:seq(1, N)).

-spec 'é'(integer()) -> integer().
'é'(I) ->
    ?MODULE:'a<b&"c;d e'(I) + 1.

-spec 'a<b&"c;d e'(integer()) -> integer().
'a<b&"c;d e'(I) ->
    I * 2.
