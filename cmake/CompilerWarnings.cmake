# Warnings for every sandweave target; SANDWEAVE_WERROR turns them into errors (CI does).
function(sandweave_set_warnings target)
    target_compile_options(${target} PRIVATE
        -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast -Wcast-align
        -Wunused -Woverloaded-virtual -Wnull-dereference -Wdouble-promotion -Wformat=2
        -Wimplicit-fallthrough)
    if(SANDWEAVE_WERROR)
        target_compile_options(${target} PRIVATE -Werror)
    endif()
endfunction()
