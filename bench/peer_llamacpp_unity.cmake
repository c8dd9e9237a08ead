# CMAKE_PROJECT_INCLUDE for bench/peer_llamacpp_build.sh: once the tree is configured, the
# libllama target (~180 .cpp files, most of them one model's graph) compiles as a unity build:
# its files in batches of 12, so their shared headers are parsed once a batch instead of once a
# file: the same code, less compile work on a small shared machine. Files with file-local
# helpers (`static ...` or an anonymous namespace at file scope, whose names may clash in a
# batch) compile alone, as before.
# Nothing in ggml (the matmuls) changes.
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL peer_llamacpp_unity)
function(peer_llamacpp_unity)
    foreach(t llama)
        if(NOT TARGET ${t})
            continue()
        endif()
        set_target_properties(${t} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 12)
        get_target_property(dir ${t} SOURCE_DIR)
        get_target_property(srcs ${t} SOURCES)
        foreach(s ${srcs})
            if(NOT s MATCHES "\\.cpp$")
                continue()
            endif()
            set(f "${s}")
            if(NOT IS_ABSOLUTE "${f}")
                set(f "${dir}/${s}")
            endif()
            file(STRINGS "${f}" local REGEX "^(static |namespace {)")
            if(local)
                set_source_files_properties("${s}" TARGET_DIRECTORY ${t} PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
            endif()
        endforeach()
    endforeach()
endfunction()
